"""Imported for its effect: pyarrow's one-time set-up for converting Python objects.

The first ``pa.array`` of a process makes pyarrow look for pandas (importing it when
installed, about 0.3 s). Worker parents import this module before they fork workers,
and the fork server preloads it, so workers start with that done.
"""

import pyarrow as pa

pa.array([0])

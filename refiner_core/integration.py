"""The one seam through which integrations (refiner_dagster) reach engine internals.

Users need nothing from here: ``refiner_core.__all__`` and ``PUBLIC_MODULES`` are the
user API. An integration that schedules the engine's stages itself (plans shards on one
machine, writes them on others, finalizes in a later step) also needs to reduce the
persisted manifests the way finalization does, to finalize an output from its record
alone, to size its worker pools, to own a folder while it publishes (one publisher
at a time), and to start a Lance dataset version from its parent's files; those are these names, and an integration imports refiner_core's internals
only through this module (``tests/test_layering.py`` enforces it for refiner_dagster).

Example:
    >>> committed_counters(choose_committed([], run_id="0123456789ab").values())["rows_written"]
    0
"""

from __future__ import annotations

from .cpus import usable_cpus
from .io.ownership import OutputOwnership
from .lance.append import share_lance_dataset
from .manifests._attempts import choose_committed, committed_counters
from .sinks import finalize_output

__all__ = [
    "OutputOwnership",
    "choose_committed",
    "committed_counters",
    "finalize_output",
    "share_lance_dataset",
    "usable_cpus",
]

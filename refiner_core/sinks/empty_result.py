"""An empty result still reads back: one 0-row data file with the result's columns.

Attempts that wrote no rows write no data file; each records the columns it knew
(``extra.empty_schema`` in its manifest: from a 0-row block, or the source's
columns when every step only filters). When no committed attempt of the run wrote a
data file, finalization writes one 0-row file under the name of the first committed
attempt, so ``read_parquet(out)`` returns no rows with the right schema instead of
failing on a folder without data files, and a mostly empty result never gets a file
per empty shard.

Example:
    >>> import pyarrow as pa
    >>> schema_from_text(schema_to_text(pa.schema([("id", pa.int32())]))).names
    ['id']
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

import pyarrow as pa

from ..manifests import AttemptManifest

if TYPE_CHECKING:
    from .files import FileSink

EMPTY_SCHEMA_KEY = "empty_schema"


def schema_to_text(schema: pa.Schema) -> str:
    """``schema`` (field metadata included) as text a JSON manifest can hold."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def write_empty_result(sink: FileSink, committed: dict[str, AttemptManifest]) -> list[str]:
    """Write the 0-row file of an empty result; returns the files written (none when a
    committed attempt wrote data, or when no attempt knew the columns)."""
    if not sink.read_suffixes or not committed:
        return []
    if any(m.files for m in committed.values()):
        return []
    known = [m for _, m in sorted(committed.items()) if EMPTY_SCHEMA_KEY in m.extra]
    if not known:
        return []
    first = known[0]
    schema = schema_from_text(first.extra[EMPTY_SCHEMA_KEY])
    relative = sink.template.format(first.shard_id, first.attempt_id)
    with sink.folder.open_atomic(relative) as f:
        sink.open_table_writer(f, schema).close()
    return [relative]

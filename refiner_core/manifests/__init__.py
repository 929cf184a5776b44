"""What runs leave next to their output: attempt manifests and the dataset summary.

Both are typed values with a versioned JSON form (``format_version``), read and
written only here, so the engine, the sinks and refiner_dagster agree on them::

    <output>/_refiner/attempts/<shard>__<attempt>.json   one AttemptManifest per attempt
    <output>/_refiner/summary.json                       the DatasetSummary of finalization

Each manifest carries the attempt's :class:`ReferenceAudit` (the references it wrote,
checked when it closed); the summary carries their sum.

Files written before ``format_version`` existed read as version 1; a newer version
than this release knows fails, naming the file and the version. Ids, paths and the
reduction over manifests are the engine's (``_attempts``); integrations reach them
through :mod:`refiner_core.integration`.

Example:
    >>> m = AttemptManifest(run_id="r1", shard_id="00000", attempt_id="0123456789ab",
    ...                     started_at=1.0, completed_at=2.0, files=("part.parquet",),
    ...                     counters={"rows_written": 3})
    >>> AttemptManifest.from_json(m.to_json(), where="example") == m
    True
"""

from ._attempts import ASSET_COUNTER_KEYS, BYTE_COUNTER_KEYS, COUNTER_KEYS, FINALIZE_COUNTER_KEYS
from .audit import ReferenceAudit, ReferenceFailure
from .reading import PersistedManifests, read_manifests, read_persisted
from .values import AttemptManifest, AttemptResult, DatasetSummary, human_bytes, write_manifest

__all__ = [
    "ASSET_COUNTER_KEYS",
    "BYTE_COUNTER_KEYS",
    "COUNTER_KEYS",
    "FINALIZE_COUNTER_KEYS",
    "AttemptManifest",
    "AttemptResult",
    "DatasetSummary",
    "PersistedManifests",
    "ReferenceAudit",
    "ReferenceFailure",
    "human_bytes",
    "read_manifests",
    "read_persisted",
    "write_manifest",
]

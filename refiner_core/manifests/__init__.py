"""What runs leave next to their output: attempt manifests and the dataset summary.

Both are typed values with a versioned JSON form (``format_version``), read and
written only here, so the engine, the sinks and refiner_dagster agree on them::

    <output>/_refiner/attempts/<shard>__<attempt>.json   one AttemptManifest per attempt
    <output>/_refiner/summary.json                       the DatasetSummary of finalization

Files written before ``format_version`` existed read as version 1; a newer version
than this release knows fails, naming the file and the version.

Example:
    >>> m = AttemptManifest(run_id="r1", shard_id="00000", attempt_id="0123456789ab",
    ...                     started_at=1.0, completed_at=2.0, files=("part.parquet",),
    ...                     counters={"rows_written": 3})
    >>> AttemptManifest.from_json(m.to_json(), where="example") == m
    True
    >>> committed_counters([m])["rows_written"]
    3
"""

from .attempts import (
    ASSET_COUNTER_KEYS,
    ATTEMPT_ID_PATTERN,
    BYTE_COUNTER_KEYS,
    COUNTER_KEYS,
    FINALIZE_COUNTER_KEYS,
    LAYOUT_PATH,
    MANIFEST_DIR,
    SHARD_ID_PATTERN,
    SUMMARY_PATH,
    add_counters,
    attempt_key,
    choose_committed,
    committed_counters,
    empty_counters,
    manifest_path,
    new_attempt_id,
    new_run_id,
    parse_attempt_key,
)
from .reading import (
    ManifestListing,
    PersistedManifests,
    list_manifests,
    read_manifests,
    read_persisted,
)
from .values import (
    FORMAT_VERSION,
    AttemptManifest,
    DatasetSummary,
    human_bytes,
    make_manifest,
    write_manifest,
)

__all__ = [
    "ASSET_COUNTER_KEYS",
    "ATTEMPT_ID_PATTERN",
    "BYTE_COUNTER_KEYS",
    "COUNTER_KEYS",
    "FINALIZE_COUNTER_KEYS",
    "FORMAT_VERSION",
    "LAYOUT_PATH",
    "MANIFEST_DIR",
    "SHARD_ID_PATTERN",
    "SUMMARY_PATH",
    "AttemptManifest",
    "DatasetSummary",
    "ManifestListing",
    "PersistedManifests",
    "add_counters",
    "attempt_key",
    "choose_committed",
    "committed_counters",
    "empty_counters",
    "human_bytes",
    "list_manifests",
    "make_manifest",
    "manifest_path",
    "new_attempt_id",
    "new_run_id",
    "parse_attempt_key",
    "read_manifests",
    "read_persisted",
    "write_manifest",
]

"""refiner_core: turn large robotics and media datasets into training-ready tables.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> out = tempfile.mkdtemp()
    >>> pipeline = mdr.from_items([{"episode": i, "num_frames": 100 * i} for i in range(4)])
    >>> pipeline = pipeline.map(lambda row: {"long": row.num_frames > 150})
    >>> stats = pipeline.write_parquet(out).launch_local(num_workers=2)
    >>> stats.summary.counters["rows_written"]
    4
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import datatype
from .errors import RefinerError, StageFailed, StepError
from .execution.fingerprint import RunDirMismatch
from .execution.launcher import LaunchStats
from .io import ChecksumMismatchError, DataFile, DataFolder, iter_blobs, read_blob, read_blobs
from .io.ownership import OutputFolderBusy, OwnershipLost
from .io.versions import check_version
from .manifests import DatasetSummary
from .pipeline.pipeline import Pipeline
from .pipeline.sequence import PipelineSequence
from .row import Row
from .sinks.assets import BlobAssetConfig, FileAssetConfig
from .sources import MAX_SHARDS, ItemsSource, JsonlSource, ParquetSource, Shard
from .sources.base import DEFAULT_TARGET_SHARD_BYTES
from .sources.committed import UncommittedOutput
from .sources.lerobot import LeRobotSource, RowsMode
from .video import ClipNotOnKeyframe, read_clip, read_frames, verify_video

# Submodules a user imports, besides the names in ``__all__``. Integrations such as
# refiner_dagster import only these, ``__all__`` and the seam ``refiner_core.integration``.
PUBLIC_MODULES = ("datatype", "errors", "inference", "io", "manifests", "vocabulary")


def read_parquet(
    inputs: Any,
    *,
    dtypes: dict[str, Any] | None = None,
    columns: list[str] | None = None,
    num_shards: int | None = None,
    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
    storage_options: dict[str, Any] | None = None,
    uncommitted: bool = False,
    version: str | None = None,
    as_of: datetime | None = None,
) -> Pipeline:
    """Read Parquet files (path, glob, folder or list; local or any fsspec URL).

    A folder written by refiner reads as exactly the files its finalization summary
    (``_refiner/summary.json``) lists; one that was never finalized raises
    ``UncommittedOutput`` unless ``uncommitted=True``, which reads every Parquet file
    in it. Other folders read as all the Parquet files below them.

    A versioned dataset folder (a Dagster dataset or partition folder, with
    ``_current.json`` beside its ``v-<id>/`` version folders) reads as its published
    version only, whatever other versions are on disk; ``version="v-<id>"`` reads
    another version still on disk instead (``refiner_core.io.UnknownVersion``, naming
    the versions on disk, when it is not). ``as_of=datetime`` (timezone-aware) reads the
    version that was published at that moment instead, from the publish history the
    pointer keeps (``UnknownVersion`` naming the dataset and its earliest recorded
    publish when nothing was published then). The version is chosen when the stage plans.
    """
    wanted = check_version(version, "read_parquet", as_of)
    return Pipeline(
        ParquetSource(
            inputs,
            dtypes=dtypes,
            columns=columns,
            num_shards=num_shards,
            target_shard_bytes=target_shard_bytes,
            storage_options=storage_options,
            uncommitted=uncommitted,
            version=wanted,
        )
    )


def read_jsonl(
    inputs: Any,
    *,
    dtypes: dict[str, Any] | None = None,
    num_shards: int | None = None,
    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
    storage_options: dict[str, Any] | None = None,
    uncommitted: bool = False,
    version: str | None = None,
    as_of: datetime | None = None,
) -> Pipeline:
    """Read JSON Lines files; shards are byte ranges cut at newlines.

    Refiner output folders read as their committed files, and versioned dataset folders
    as their published version (or ``version="v-<id>"`` / ``as_of=``), as in :func:`read_parquet`
    (``uncommitted=True`` reads every JSONL file of an unfinalized one).
    """
    wanted = check_version(version, "read_jsonl", as_of)
    return Pipeline(
        JsonlSource(
            inputs,
            dtypes=dtypes,
            num_shards=num_shards,
            target_shard_bytes=target_shard_bytes,
            storage_options=storage_options,
            uncommitted=uncommitted,
            version=wanted,
        )
    )


def read_lance(
    uri: str,
    *,
    dtypes: dict[str, Any] | None = None,
    columns: list[str] | None = None,
    version: int | str | None = None,
    num_shards: int | None = None,
    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
    storage_options: dict[str, Any] | None = None,
    as_of: datetime | None = None,
) -> Pipeline:
    """Read one version of a Lance dataset; shards are groups of whole fragments.

    ``version`` as a number is a Lance table version (the latest when ``None``). ``uri``
    may also be a versioned dataset folder (``_current.json`` beside ``v-<id>/`` Lance
    datasets, as refiner_dagster publishes them): it reads the published version's
    table, with ``version="v-<id>"`` another version still on disk, or with
    ``as_of=datetime`` the one published at that moment
    (``refiner_core.io.UnknownVersion``, naming the versions on disk, when it is not).
    """
    from .sources.lance import LanceSource

    return Pipeline(
        LanceSource(
            uri,
            dtypes=dtypes,
            columns=columns,
            version=version,
            as_of=as_of,
            num_shards=num_shards,
            target_shard_bytes=target_shard_bytes,
            storage_options=storage_options,
        )
    )


def read_lerobot(
    root: str,
    *,
    episodes: list[int] | None = None,
    rows: RowsMode = "frames",
    video_keys: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    num_shards: int | None = None,
) -> Pipeline:
    """Read a LeRobot v3.0 (or v2.1) dataset (local folder or any fsspec URL).

    ``rows="frames"`` gives one row per frame (the columns of ``data/``, plus ``task``),
    each camera a ``video_clip`` of that frame's instant; ``rows="episodes"`` one row per
    episode with ``episode_index``, ``length``, ``tasks``, a ``video_clip`` per camera and
    the episode's statistics, a ``stats/<feature>/<name>`` column each.
    Shards are runs of whole episodes. ``episodes=`` reads only those episodes' data,
    ``video_keys=`` only those cameras. Read clips with :func:`read_clip` or
    :func:`read_frames`.
    """
    return Pipeline(
        LeRobotSource(
            root,
            episodes=episodes,
            rows=rows,
            video_keys=video_keys,
            storage_options=storage_options,
            num_shards=num_shards,
        )
    )


def __getattr__(name: str) -> Any:
    # ``mdr.inference`` (httpx and pydantic: about half of this package's import
    # time) is imported on first use, so pipelines without model calls never pay for it.
    if name == "inference":
        import importlib

        return importlib.import_module(".inference", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def from_items(
    items: Any, *, items_per_shard: int = 1000, dtypes: dict[str, Any] | None = None
) -> Pipeline:
    """Rows from Python values: mappings become rows, other values ``{"item": value}``."""
    return Pipeline(ItemsSource(items, items_per_shard=items_per_shard, dtypes=dtypes))


__all__ = [
    "MAX_SHARDS",
    "BlobAssetConfig",
    "ChecksumMismatchError",
    "ClipNotOnKeyframe",
    "DataFile",
    "DataFolder",
    "DatasetSummary",
    "FileAssetConfig",
    "LaunchStats",
    "OutputFolderBusy",
    "OwnershipLost",
    "Pipeline",
    "PipelineSequence",
    "RefinerError",
    "Row",
    "RunDirMismatch",
    "Shard",
    "StageFailed",
    "StepError",
    "UncommittedOutput",
    "datatype",
    "from_items",
    "inference",
    "iter_blobs",
    "read_blob",
    "read_blobs",
    "read_clip",
    "read_frames",
    "read_jsonl",
    "read_lance",
    "read_lerobot",
    "read_parquet",
    "verify_video",
]

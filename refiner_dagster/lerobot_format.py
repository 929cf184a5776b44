"""``refiner/format: lerobot``: a dataset asset written as a LeRobot v3.0 dataset.

An asset whose metadata says ``refiner/format: lerobot`` returns episode rows (or frame
rows) as a lazy pipeline, like any refiner dataset asset; its IO manager, or the write
steps of :func:`~refiner_dagster.build_dataset_asset`, run ``write_lerobot`` into the
version folder, which then holds ``meta/``, ``data/`` and ``videos/`` once finalized::

    <base_url>/<asset/key>/[<partition>/]v-<run id>/   meta/, data/, videos/, _refiner/

The write steps stage per-task data and video files; finalization merges the statistics,
numbers episodes and frames, writes ``meta/`` and then audits the version with the
blocking ``video_integrity`` check (:func:`video_integrity_result`, ``mdr.verify_video``)
before the pointer moves, so a dataset whose video drifts from its table is never
published. Downstream assets load the published version with ``mdr.read_lerobot``.

LeRobot's options are asset metadata, checked when the definitions load:

==========================================  ========================================
``refiner/lerobot_fps``                     frames per second (required, above 0)
``refiner/lerobot_robot_type``              ``meta/info.json``'s ``robot_type`` (text)
``refiner/lerobot_video_files_size_in_mb``  shared MP4 size target (default 200)
``refiner/lerobot_data_files_size_in_mb``   data Parquet size target (default 100)
``refiner/lerobot_chunks_size``             files per chunk folder (default 1000)
==========================================  ========================================

Example:
    >>> from refiner_dagster.lerobot_format import lerobot_options
    >>> lerobot_options({"format": "lerobot", "lerobot_fps": 30}, where="asset arm").fps
    30
    >>> lerobot_options({"lerobot_fps": 30}, where="asset arm")
    Traceback (most recent call last):
    ...
    ValueError: asset arm: metadata refiner/lerobot_fps applies only to LeRobot datasets; set refiner/format: lerobot as well, or remove it
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr
from refiner_core.manifests import DatasetSummary

if TYPE_CHECKING:
    from .storage import DatasetVersion

LEROBOT_FORMAT: Final = "lerobot"
DatasetFormat = Literal["parquet", "jsonl", "lance", "lerobot"]
"""A dataset asset's format: a table format, or a LeRobot v3.0 dataset."""
DATASET_FORMATS: tuple[DatasetFormat, ...] = get_args(DatasetFormat)
LEROBOT_KEYS = (
    "lerobot_fps",
    "lerobot_robot_type",
    "lerobot_video_files_size_in_mb",
    "lerobot_data_files_size_in_mb",
    "lerobot_chunks_size",
)
VIDEO_INTEGRITY_CHECK = "video_integrity"
# Key of a version record holding the options it was written with.
RECORD_KEY = "lerobot"
_SHOWN_FAILURES = 10


@dataclass(frozen=True)
class LeRobotOptions:
    """``write_lerobot``'s options for one dataset asset (see the module docstring)."""

    fps: float
    robot_type: str | None = None
    video_files_size_in_mb: float = 200
    data_files_size_in_mb: float = 100
    chunks_size: int = 1000

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def record_of(options: LeRobotOptions | None) -> dict[str, Any]:
        """The version record entries of a dataset written with ``options`` (none if not LeRobot)."""
        return {} if options is None else {RECORD_KEY: options.to_record()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> LeRobotOptions:
        options = record.get(RECORD_KEY)
        if not isinstance(options, dict) or "fps" not in options:
            raise ValueError(
                f"{where} is a LeRobot version whose record has no write options; "
                "materialize the dataset asset again"
            )
        return cls(**options)


def _number_above_zero(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(
            f"{where}: metadata refiner/{key}={value!r} must be a number above 0 "
            f"(for example refiner/{key}: 30)"
        )
    return value


def check_lerobot_value(name: str, value: Any, where: str) -> Any:
    """``value`` when it suits LeRobot option ``name`` (a key of :data:`LEROBOT_KEYS`)."""
    if name == "lerobot_robot_type":
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"{where}: metadata refiner/{name}={value!r} must be a non-empty string "
                "(for example refiner/lerobot_robot_type: so100)"
            )
        return value
    if name == "lerobot_chunks_size":
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"{where}: metadata refiner/{name}={value!r} must be a positive integer "
                "(for example refiner/lerobot_chunks_size: 1000)"
            )
        return value
    return _number_above_zero(value, name, where)


def lerobot_options(found: Mapping[str, Any], *, where: str) -> LeRobotOptions | None:
    """The LeRobot options of an asset's checked settings (``None`` when not LeRobot).

    ``ValueError`` when LeRobot keys come without ``refiner/format: lerobot``, or a
    LeRobot dataset has no ``refiner/lerobot_fps``.
    """
    given = {k: found[k] for k in LEROBOT_KEYS if k in found}
    if found.get("format") != LEROBOT_FORMAT:
        if given:
            raise ValueError(
                f"{where}: metadata refiner/{next(iter(given))} applies only to LeRobot "
                "datasets; set refiner/format: lerobot as well, or remove it"
            )
        return None
    if "lerobot_fps" not in given:
        raise ValueError(
            f"{where}: a LeRobot dataset (refiner/format: lerobot) needs its frame rate; set "
            "metadata refiner/lerobot_fps (for example 30)"
        )
    return LeRobotOptions(**{k[len("lerobot_") :]: v for k, v in given.items()})


def declares_lerobot(metadata: Mapping[str, Any] | None) -> bool:
    """Whether an asset's definition metadata makes it a LeRobot dataset."""
    value = (metadata or {}).get("refiner/format")
    return getattr(value, "value", value) == LEROBOT_FORMAT


def lerobot_sink_options(version: DatasetVersion) -> dict[str, Any]:
    """The options ``write_lerobot`` wrote ``version`` with, as its record keeps them."""
    options = LeRobotOptions.from_record(version.record, version.describe())
    return {
        "fps": options.fps,
        "robot_type": options.robot_type,
        "video_files_size_in_mb": options.video_files_size_in_mb,
        "data_files_size_in_mb": options.data_files_size_in_mb,
        "chunks_size": options.chunks_size,
    }


def lerobot_writer(
    version: DatasetVersion, pipeline: mdr.Pipeline, assets: Any
) -> mdr.PipelineSequence:
    """``pipeline`` writing ``version`` as a LeRobot dataset; clips are read with the
    source storage options of ``assets`` (the IO manager's asset config), when given."""
    return pipeline.write_lerobot(
        version.url,
        **lerobot_sink_options(version),
        storage_options=version.storage_options or None,
        clip_storage_options=getattr(assets, "source_storage_options", None),
    )


def open_lerobot(version: DatasetVersion, columns: list[str] | None = None) -> mdr.Pipeline:
    """A lazy pipeline over a LeRobot version's frames (clips are references, not bytes)."""
    pipeline = mdr.read_lerobot(version.url, storage_options=version.storage_options or None)
    return pipeline if columns is None else pipeline.map(_Columns(tuple(columns)))


@dataclass(frozen=True)
class _Columns:
    """A row step keeping only ``names`` (picklable, for worker processes)."""

    names: tuple[str, ...]

    def __call__(self, row: mdr.Row) -> mdr.Row:
        return mdr.Row({name: row[name] for name in self.names})


def lerobot_schema(version: DatasetVersion) -> pa.Schema | None:
    """The frame rows' schema: the first data file's columns plus a clip per camera."""
    folder = version.output_folder()
    try:
        info = json.loads(folder.read_bytes("meta/info.json"))
    except FileNotFoundError:
        return None
    if not info.get("total_frames"):
        return None
    data = info["data_path"].format(chunk_index=0, file_index=0)
    with folder.file(data).open("rb") as f:
        schema = pq.read_schema(f)
    cameras = [k for k, v in info.get("features", {}).items() if v.get("dtype") == "video"]
    clips = [mdr.datatype.to_field(k, mdr.datatype.video_clip()) for k in cameras]
    return pa.schema([*schema.remove_metadata(), *clips])


def lerobot_metadata(version: DatasetVersion, summary: DatasetSummary) -> dict[str, Any]:
    """A published LeRobot version's own counters (frames, clips copied or re-encoded)."""
    if version.format != LEROBOT_FORMAT:
        return {}
    return {
        name: dg.MetadataValue.int(summary.counters.get(name, 0))
        for name in ("frames_written", "clips_remuxed", "clips_transcoded")
    }


def video_integrity_spec(key: dg.AssetKey) -> dg.AssetCheckSpec:
    """The blocking ``video_integrity`` check of a LeRobot dataset asset ``key``."""
    return dg.AssetCheckSpec(
        VIDEO_INTEGRITY_CHECK,
        asset=key,
        blocking=True,
        description=(
            "Every episode x camera: the video's frames match the episodes table (count, "
            "first and last timestamp, no gap, monotonic, file not truncated), read from "
            "packet timestamps before publishing; a failure keeps the version unpublished."
        ),
    )


def video_integrity_result(version: DatasetVersion) -> dg.AssetCheckResult:
    """``mdr.verify_video`` on a reduced LeRobot version, as an ERROR-severity result."""
    audit = mdr.verify_video(version.url, storage_options=version.storage_options or None)
    failed_episodes = sorted({e for f in audit.failures for e in f.episodes})
    metadata: dict[str, Any] = {
        "video_files": dg.MetadataValue.int(audit.files),
        "clips_checked": dg.MetadataValue.int(audit.clips),
        "packets_read": dg.MetadataValue.int(audit.packets),
        "failures": dg.MetadataValue.int(len(audit.failures)),
        "failed_episodes": dg.MetadataValue.json(failed_episodes),
    }
    if audit.ok:
        return dg.AssetCheckResult(check_name=VIDEO_INTEGRITY_CHECK, passed=True, metadata=metadata)
    shown = [str(f) for f in audit.failures[:_SHOWN_FAILURES]]
    metadata["first_failures"] = dg.MetadataValue.md("\n".join(f"- {line}" for line in shown))
    more = len(audit.failures) - len(shown)
    return dg.AssetCheckResult(
        check_name=VIDEO_INTEGRITY_CHECK,
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description=(
            f"{len(audit.failures)} video check(s) failed: "
            + "; ".join(shown)
            + (f"; and {more} more" if more > 0 else "")
            + ". Fix or drop those episodes upstream and materialize the dataset again"
        ),
    )

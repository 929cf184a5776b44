"""The metadata of a LeRobot dataset: ``meta/info.json``, the episodes and the tasks.

A v3.0 dataset keeps many episodes per data file (``data/chunk-*/file-*.parquet``, one row
per frame) and per video file (one MP4 per camera and chunk); an episode's video is the
time range ``[from_timestamp, to_timestamp)`` of its file, as ``meta/episodes`` records.
A v2.1 dataset has a data file and an MP4 per episode (see :mod:`.lerobot_v21`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..io.datafile import full_url, resolve

SUPPORTED_VERSIONS = ("v3.0", "v2.1")


@dataclass(frozen=True)
class EpisodeVideo:
    """Where one camera's video of an episode lies: a time range of one file."""

    url: str
    from_timestamp: float
    to_timestamp: float


@dataclass(frozen=True)
class Episode:
    """One episode: its frames' data file and, per video key, its clip."""

    index: int
    length: int
    tasks: tuple[str, ...]
    data_url: str
    videos: tuple[tuple[str, EpisodeVideo], ...]
    # ``stats/<feature>/<name>`` -> value, as LeRobot keeps them (read only when asked)
    stats: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class LeRobotMeta:
    """What ``read_lerobot`` needs of a dataset's ``meta/`` folder."""

    root: str
    fps: float
    video_keys: tuple[str, ...]
    episodes: tuple[Episode, ...]
    tasks: dict[int, str]


def _fail(root: str, what: str) -> ValueError:
    return ValueError(f"read_lerobot {root}: {what}")


def load_meta(
    root: str,
    storage_options: dict[str, Any] | None,
    video_keys: list[str] | None,
    *,
    with_stats: bool = False,
) -> LeRobotMeta:
    """Read ``meta/`` of the dataset at ``root`` (``with_stats``: each episode's statistics
    too); ``ValueError`` names the file and the fix."""
    fs, base = resolve(root, storage_options)
    root_url = full_url(fs, base).rstrip("/")
    info_path = posixpath.join(base, "meta", "info.json")
    try:
        with fs.open(info_path, "rb") as f:
            info = json.load(f)
    except FileNotFoundError as exc:
        raise _fail(
            root_url,
            "no meta/info.json; point root at the folder that holds meta/, data/ and videos/",
        ) from exc
    version = info.get("codebase_version")
    if version not in SUPPORTED_VERSIONS:
        raise _fail(
            root_url,
            f"meta/info.json says codebase_version={version!r}; read_lerobot reads "
            f"{', '.join(SUPPORTED_VERSIONS)} datasets. Convert it with LeRobot's converters",
        )
    features = info.get("features") or {}
    all_keys = tuple(
        k for k, f in features.items() if isinstance(f, dict) and f.get("dtype") == "video"
    )
    if video_keys is None:
        keys = all_keys
    else:
        unknown = [k for k in video_keys if k not in all_keys]
        if unknown:
            raise _fail(
                root_url, f"video_keys {unknown} are not video features; it has {list(all_keys)}"
            )
        keys = tuple(video_keys)
    fps = float(info["fps"])
    if version == "v2.1":
        from .lerobot_v21 import v21_episodes, v21_tasks, with_v21_stats

        v21 = sorted(v21_episodes(fs, base, root_url, info, keys, fps), key=lambda e: e.index)
        if with_stats:
            v21 = with_v21_stats(v21, fs, base, skipped=set(all_keys) - set(keys))
        return LeRobotMeta(root_url, fps, keys, tuple(v21), v21_tasks(fs, base))
    episode_files = sorted(
        fs.glob(posixpath.join(base, "meta", "episodes", "chunk-*", "file-*.parquet"))
    )
    if not episode_files:
        raise _fail(
            root_url, "no meta/episodes/chunk-*/file-*.parquet; the dataset was not finalized"
        )
    episodes: list[Episode] = []
    for path in episode_files:
        episodes.extend(_episodes_of(fs, path, root_url, info, keys, with_stats, all_keys))
    episodes.sort(key=lambda e: e.index)
    return LeRobotMeta(root_url, fps, keys, tuple(episodes), _tasks(fs, base, root_url))


def _episodes_of(
    fs: Any,
    path: str,
    root: str,
    info: dict[str, Any],
    keys: tuple[str, ...],
    with_stats: bool,
    all_keys: tuple[str, ...],
) -> Iterator[Episode]:
    wanted = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index"]
    for key in keys:
        wanted += [
            f"videos/{key}/{name}"
            for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
        ]
    with fs.open(path, "rb") as f:
        schema = pq.read_schema(f)
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise _fail(
                root, f"{full_url(fs, path)} lacks columns {missing}; is it a v3.0 episodes file?"
            )
        skipped = set(all_keys) - set(keys)
        stats = [
            name
            for name in schema.names
            if with_stats and is_stats_column(name) and stats_feature(name) not in skipped
        ]
        f.seek(0)
        table = pq.read_table(f, columns=wanted + stats)
    for row in table.to_pylist():
        data = info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        videos = []
        for key in keys:
            prefix = f"videos/{key}/"
            relative = info["video_path"].format(
                video_key=key,
                chunk_index=row[prefix + "chunk_index"],
                file_index=row[prefix + "file_index"],
            )
            videos.append(
                (
                    key,
                    EpisodeVideo(
                        f"{root}/{relative}",
                        float(row[prefix + "from_timestamp"]),
                        float(row[prefix + "to_timestamp"]),
                    ),
                )
            )
        yield Episode(
            int(row["episode_index"]),
            int(row["length"]),
            tuple(row["tasks"] or ()),
            f"{root}/{data}",
            tuple(videos),
            tuple((name, row[name]) for name in stats),
        )


def is_stats_column(name: str) -> bool:
    """Whether ``name`` is an episode statistic, ``stats/<feature>/<name>``."""
    return name.startswith("stats/") and name.count("/") >= 2


def stats_feature(name: str) -> str:
    """The feature of statistic column ``stats/<feature>/<name>``."""
    return name[len("stats/") :].rsplit("/", 1)[0]


def _tasks(fs: Any, base: str, root: str) -> dict[int, str]:
    """``task_index -> task`` from ``meta/tasks.parquet`` (the task text is its string column)."""
    path = posixpath.join(base, "meta", "tasks.parquet")
    if not fs.exists(path):
        return {}
    with fs.open(path, "rb") as f:
        table = pq.read_table(f)
    text = [
        f.name
        for f in table.schema
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    if "task_index" not in table.column_names or not text:
        raise _fail(root, "meta/tasks.parquet needs a task_index column and a task text column")
    return dict(
        zip(table.column("task_index").to_pylist(), table.column(text[0]).to_pylist(), strict=True)
    )

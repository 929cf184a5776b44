"""The commit of ``write_lerobot``: the staged attempts become one LeRobot v3.0 dataset.

Attempts are taken in shard order. Episodes are numbered ``0..`` across them, ``index``
counts frames across them, tasks get their ``task_index`` in order of first use, and each
staged data part and video file gets the next ``file-XXX`` of its chunk
(``chunk = n // chunks_size``). ``meta/info.json`` is written last: a dataset without it is
not one yet.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...io.datafile import is_local
from ...manifests import AttemptManifest
from .attempt import stage_of
from .episodes import feature_of
from .stats import feature_stats, merge_stats

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
INFO_PATH = "meta/info.json"
# Frame columns every LeRobot dataset has, after the features, in this order.
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


class _Numbering:
    """Global file numbers, ``(chunk_index, file_index)``, handed out in order."""

    def __init__(self, chunks_size: int) -> None:
        self.chunks_size, self.next = chunks_size, 0

    def take(self) -> tuple[int, int]:
        n, self.next = self.next, self.next + 1
        return divmod(n, self.chunks_size)


def commit_dataset(sink: Any, committed: list[AttemptManifest]) -> dict[str, Any]:
    """Number, move and describe the committed attempts' episodes; returns the totals."""
    folder = sink.folder
    stages = [stage_of(m.shard_id, m.attempt_id) for m in committed]
    staged = [json.loads(folder.read_bytes(f"{s}/episodes.json")) for s in stages]
    cameras = _cameras(staged, sink.describe())
    tasks: dict[str, int] = {}
    data_numbers, videos = (
        _Numbering(sink.chunks_size),
        {k: _Numbering(sink.chunks_size) for k in cameras},
    )
    episodes: list[dict[str, Any]] = []
    schema: pa.Schema | None = None
    first_episode = first_frame = 0
    for stage, attempt in zip(stages, staged, strict=True):
        video_files = {}
        for key, numbers in attempt["files"].items():
            for number in numbers:
                video_files[key, number] = chunk_file = videos[key].take()
                _place(
                    folder,
                    f"{stage}/videos/{key}/{number}.mp4",
                    VIDEO_PATH.format(
                        video_key=key, chunk_index=chunk_file[0], file_index=chunk_file[1]
                    ),
                )
        parts = sorted({e["data_part"] for e in attempt["episodes"]})
        for part in parts:
            table = pq.read_table(folder.file(f"{stage}/data-{part}.parquet").open())
            table = _renumber(table, first_episode, first_frame, tasks)
            schema = schema or table.schema
            chunk, file = data_numbers.take()
            with folder.open_atomic(DATA_PATH.format(chunk_index=chunk, file_index=file)) as f:
                pq.write_table(table, f)
            local = table.column("episode_index").to_numpy() - first_episode
            for number, meta in enumerate(attempt["episodes"]):
                if meta["data_part"] != part:
                    continue
                rows = np.flatnonzero(local == number)
                episodes.append(
                    _episode_row(
                        first_episode + number, meta, table.take(rows), (chunk, file), video_files
                    )
                )
        first_episode += len(attempt["episodes"])
        first_frame += sum(e["length"] for e in attempt["episodes"])
    episodes.sort(key=lambda e: e["episode_index"])
    _write_meta(sink, episodes, tasks, schema, cameras, first_frame)
    for stage in stages:
        folder.rm(stage, recursive=True)
    return {"episodes": len(episodes), "frames": first_frame, "tasks": len(tasks)}


def _place(folder: Any, staged: str, relative: str) -> None:
    """Put the staged file at ``relative``: a hard link on a local disk (no bytes copied; the
    stage goes after the commit), else the store's own copy. Run again after a failed
    finalization, it replaces what the earlier run placed."""
    if is_local(folder.fs):
        directory, _, name = relative.rpartition("/")
        target = f"{folder.local_dir(directory)}/{name}"
        with contextlib.suppress(FileNotFoundError):
            os.remove(target)
        try:
            os.link(folder.join(staged), target)
        except OSError:  # no hard links here: copied below
            pass
        else:
            return
    folder.copy_from(folder.fs, folder.join(staged), relative)


def dataset_files(folder: Any) -> list[str]:
    """Every file of the dataset under ``folder``: ``meta/``, ``data/`` and ``videos/``."""
    return sorted(f for top in ("meta", "data", "videos") for f in folder.find(top))


def _cameras(staged: list[dict[str, Any]], where: str) -> dict[str, dict[str, Any]]:
    """Each camera's video info; every attempt must agree on the cameras and their size."""
    cameras: dict[str, dict[str, Any]] = {}
    for attempt in staged:
        if not attempt["episodes"]:
            continue
        for key, info in attempt["cameras"].items():
            known = cameras.setdefault(key, info)
            if (known["width"], known["height"]) != (info["width"], info["height"]):
                raise ValueError(
                    f"{where}: camera {key!r} is {known['width']}x{known['height']} in one shard "
                    f"and {info['width']}x{info['height']} in another; a LeRobot feature has one "
                    "shape. Resize the clips first or write the shards separately"
                )
    return cameras


def _renumber(table: pa.Table, first_episode: int, first_frame: int, tasks: dict[str, int]):
    """Global ``episode_index``, ``index`` and ``task_index`` (the ``task`` text dropped)."""
    for task in table.column("task").unique().to_pylist():
        tasks.setdefault(task, len(tasks))
    task_index = pa.array([tasks[t] for t in table.column("task").to_pylist()], pa.int64())
    columns = {
        name: table.column(name)
        for name in table.column_names
        if name not in (*INDEX_COLUMNS, "task")
    }
    columns["timestamp"] = table.column("timestamp")
    columns["frame_index"] = table.column("frame_index")
    columns["episode_index"] = pc.add(table.column("episode_index"), first_episode)
    columns["index"] = pc.add(table.column("index"), first_frame)
    columns["task_index"] = task_index
    return pa.table(columns)


def _episode_row(
    episode_index: int,
    meta: dict[str, Any],
    frames: pa.Table,
    data_file: tuple[int, int],
    video_files: dict[tuple[str, int], tuple[int, int]],
) -> dict[str, Any]:
    index = frames.column("index").to_numpy()
    row: dict[str, Any] = {
        "episode_index": episode_index,
        "tasks": meta["tasks"],
        "length": meta["length"],
        "data/chunk_index": data_file[0],
        "data/file_index": data_file[1],
        "dataset_from_index": int(index.min()),
        "dataset_to_index": int(index.max()) + 1,
        "meta/episodes/chunk_index": 0,
        "meta/episodes/file_index": 0,
    }
    for key, video in meta["videos"].items():
        chunk, file = video_files[key, video["file"]]
        row[f"videos/{key}/chunk_index"] = chunk
        row[f"videos/{key}/file_index"] = file
        row[f"videos/{key}/from_timestamp"] = video["from"]
        row[f"videos/{key}/to_timestamp"] = video["to"]
    stats = {
        name: found
        for name in frames.column_names
        if (found := _column_stats(frames.column(name))) is not None
    }
    stats.update(meta["image_stats"])
    for feature, values in stats.items():
        for name, value in values.items():
            row[f"stats/{feature}/{name}"] = value
    return row


def _column_stats(column: pa.ChunkedArray) -> dict[str, Any] | None:
    dtype = column.type
    if pa.types.is_fixed_size_list(dtype):
        dtype = dtype.value_type
        values = pc.list_flatten(column).to_numpy().reshape(len(column), -1)
    else:
        values = column.to_numpy()
    if not (
        pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype)
    ):
        return None
    return feature_stats(values)


def _write_meta(
    sink: Any,
    episodes: list[dict[str, Any]],
    tasks: dict[str, int],
    schema: pa.Schema | None,
    cameras: dict[str, dict[str, Any]],
    frames: int,
) -> None:
    """``meta/episodes``, ``meta/tasks.parquet``, ``meta/stats.json``, then ``meta/info.json``."""
    import pandas as pd

    folder = sink.folder
    with folder.open_atomic(EPISODES_PATH) as f:
        pq.write_table(pa.Table.from_pylist(episodes), f)
    # LeRobot reads the task text as the table's (pandas) index
    tasks_frame = pd.DataFrame({"task_index": list(tasks.values())}, index=list(tasks))
    with folder.open_atomic("meta/tasks.parquet") as f:
        pq.write_table(pa.Table.from_pandas(tasks_frame), f)
    folder.write_bytes("meta/stats.json", json.dumps(_merged_stats(episodes), indent=4).encode())
    info = {
        "codebase_version": "v3.0",
        "robot_type": sink.robot_type,
        "total_episodes": len(episodes),
        "total_frames": frames,
        "total_tasks": len(tasks),
        "chunks_size": sink.chunks_size,
        "data_files_size_in_mb": sink.data_files_size_in_mb,
        "video_files_size_in_mb": sink.video_files_size_in_mb,
        "fps": sink.fps,
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "features": _features(schema, cameras, sink.fps),
    }
    folder.write_bytes(INFO_PATH, json.dumps(info, indent=4).encode())


def _features(
    schema: pa.Schema | None, cameras: dict[str, dict[str, Any]], fps: float
) -> dict[str, Any]:
    features = {field.name: feature_of(field) for field in schema or []}
    for key, info in cameras.items():
        features[key] = {
            "dtype": "video",
            "shape": [info["height"], info["width"], 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": info["height"],
                "video.width": info["width"],
                "video.codec": info["codec"],
                "video.pix_fmt": info["pix_fmt"],
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    return features


def _merged_stats(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Each feature's ``stats/<feature>/<name>`` columns merged over the episodes."""
    by_feature: dict[str, list[dict[str, Any]]] = {}
    for position, episode in enumerate(episodes):
        for column, value in episode.items():
            if column.startswith("stats/"):
                feature, name = column[len("stats/") :].rsplit("/", 1)
                by_feature.setdefault(feature, [{} for _ in episodes])[position][name] = value
    return {feature: merge_stats(per_episode) for feature, per_episode in by_feature.items()}

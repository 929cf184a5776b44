"""Writes small LeRobot v3.0 datasets with real H.264 video, for the reader's tests.

Episodes share one data file and, per camera, one MP4; each episode starts on a keyframe
(as LeRobot's concatenated episodes do). Frame ``i`` of the dataset is a solid image of
value ``pixel(i, camera)``, so a decoded frame tells which one it is.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FPS = 10
WIDTH, HEIGHT = 32, 24
TASKS = ("pick the cube", "place the cube")


def pixel(frame: int, camera: int) -> int:
    return (frame * 16 + camera * 100) % 240 + 8


def _encode(
    path: str,
    episode_lengths: list[int],
    camera: int,
    gop: int,
    size: tuple[int, int],
    noise: bool,
) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    starts = np.cumsum([0, *episode_lengths[:-1]]).tolist()
    with av.open(path, "w") as out:
        stream = out.add_stream(
            "libx264",
            rate=FPS,
            options={"x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"},
        )
        (stream.width, stream.height), stream.pix_fmt = size, "yuv420p"
        random = np.random.default_rng(camera)
        for i in range(sum(episode_lengths)):
            image = np.full((size[1], size[0], 3), pixel(i, camera), np.uint8)
            if noise:  # hard to compress: a file of some MB; the top-left corner stays solid
                image[8:] = random.integers(0, 256, image[8:].shape, np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if i in starts:
                frame.pict_type = av.video.frame.PictureType.I
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def write_dataset(
    root: str,
    episode_lengths: list[int],
    *,
    cameras: tuple[str, ...] = ("observation.images.front",),
    gop: int | None = None,
    row_group_rows: int | None = None,
    size: tuple[int, int] = (WIDTH, HEIGHT),
    noise: bool = False,
) -> str:
    """Lay out a v3.0 dataset under ``root``; ``gop`` (frames between keyframes) defaults
    to the episode length, so every episode starts on a keyframe."""
    gop = gop or episode_lengths[0]
    features = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": None},
        "action": {"dtype": "float32", "shape": [2], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    for key in cameras:
        features[key] = {
            "dtype": "video",
            "shape": [HEIGHT, WIDTH, 3],
            "names": ["height", "width", "channels"],
        }
    info = {
        "codebase_version": "v3.0",
        "fps": FPS,
        "total_episodes": len(episode_lengths),
        "total_frames": sum(episode_lengths),
        "chunks_size": 1000,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": features,
    }
    os.makedirs(f"{root}/meta/episodes/chunk-000", exist_ok=True)
    os.makedirs(f"{root}/data/chunk-000", exist_ok=True)
    with open(f"{root}/meta/info.json", "w") as f:
        json.dump(info, f)
    frames = {name: [] for name in features if features[name]["dtype"] != "video"}
    episodes = {
        "episode_index": [],
        "tasks": [],
        "length": [],
        "data/chunk_index": [],
        "data/file_index": [],
        "dataset_from_index": [],
        "dataset_to_index": [],
    }
    index = 0
    for episode, length in enumerate(episode_lengths):
        task = episode % len(TASKS)
        for k in range(length):
            frames["observation.state"].append([float(index), float(-index)])
            frames["action"].append([index / 2, 1.0])
            frames["timestamp"].append(k / FPS)
            frames["frame_index"].append(k)
            frames["episode_index"].append(episode)
            frames["index"].append(index)
            frames["task_index"].append(task)
            index += 1
        episodes["episode_index"].append(episode)
        episodes["tasks"].append([TASKS[task]])
        episodes["length"].append(length)
        episodes["data/chunk_index"].append(0)
        episodes["data/file_index"].append(0)
        episodes["dataset_from_index"].append(index - length)
        episodes["dataset_to_index"].append(index)
    for key in cameras:
        prefix = f"videos/{key}/"
        episodes[prefix + "chunk_index"] = [0] * len(episode_lengths)
        episodes[prefix + "file_index"] = [0] * len(episode_lengths)
        bounds = np.cumsum([0, *episode_lengths]) / FPS
        episodes[prefix + "from_timestamp"] = bounds[:-1].tolist()
        episodes[prefix + "to_timestamp"] = bounds[1:].tolist()
    data = pa.table(
        {
            "observation.state": pa.array(frames["observation.state"], pa.list_(pa.float32(), 2)),
            "action": pa.array(frames["action"], pa.list_(pa.float32(), 2)),
            "timestamp": pa.array(frames["timestamp"], pa.float32()),
            **{
                k: pa.array(frames[k], pa.int64())
                for k in ("frame_index", "episode_index", "index", "task_index")
            },
        }
    )
    pq.write_table(data, f"{root}/data/chunk-000/file-000.parquet", row_group_size=row_group_rows)
    pq.write_table(pa.table(episodes), f"{root}/meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(
        pa.table({"task_index": list(range(len(TASKS))), "task": list(TASKS)}),
        f"{root}/meta/tasks.parquet",
    )
    with open(f"{root}/meta/stats.json", "w") as f:
        json.dump({}, f)
    for camera, key in enumerate(cameras):
        _encode(
            f"{root}/videos/{key}/chunk-000/file-000.mp4", episode_lengths, camera, gop, size, noise
        )
    return root


def write_dataset_v21(
    root: str,
    episode_lengths: list[int],
    *,
    cameras: tuple[str, ...] = ("observation.images.front",),
) -> str:
    """Lay out a v2.1 dataset: the frames of :func:`write_dataset`, with a data file and an
    MP4 per episode (frame ``i`` of the dataset still shows ``pixel(i, camera)``)."""
    v3 = write_dataset(f"{root}.v3", episode_lengths, cameras=cameras)
    with open(f"{v3}/meta/info.json") as f:
        info = json.load(f)
    info["codebase_version"] = "v2.1"
    info["data_path"] = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    info["video_path"] = (
        "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    )
    os.makedirs(f"{root}/meta", exist_ok=True)
    os.makedirs(f"{root}/data/chunk-000", exist_ok=True)
    with open(f"{root}/meta/info.json", "w") as f:
        json.dump(info, f)
    data = pq.read_table(f"{v3}/data/chunk-000/file-000.parquet")
    episodes = pq.read_table(f"{v3}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    with open(f"{root}/meta/episodes.jsonl", "w") as f:
        for e in episodes:
            f.write(
                json.dumps(
                    {
                        "episode_index": e["episode_index"],
                        "tasks": e["tasks"],
                        "length": e["length"],
                    }
                )
                + "\n"
            )
    with open(f"{root}/meta/tasks.jsonl", "w") as f:
        for i, task in enumerate(TASKS):
            f.write(json.dumps({"task_index": i, "task": task}) + "\n")
    first = 0
    for e in episodes:
        index, length = e["episode_index"], e["length"]
        pq.write_table(
            data.slice(first, length), f"{root}/data/chunk-000/episode_{index:06d}.parquet"
        )
        for camera, key in enumerate(cameras):
            path = f"{root}/videos/chunk-000/{key}/episode_{index:06d}.mp4"
            _encode_range(path, first, length, camera)
        first += length
    return root


def _encode_range(path: str, first: int, length: int, camera: int) -> None:
    """An MP4 of the dataset's frames ``first .. first + length - 1``, starting at time 0."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        (stream.width, stream.height), stream.pix_fmt = (WIDTH, HEIGHT), "yuv420p"
        for k in range(length):
            image = np.full((HEIGHT, WIDTH, 3), pixel(first + k, camera), np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, FPS)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))

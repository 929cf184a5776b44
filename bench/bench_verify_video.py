"""Benchmark: ``verify_video`` against decoding every frame with PyAV, on one LeRobot dataset.

Writes a LeRobot v3.0 dataset of ``--episodes`` episodes x ``--cameras`` cameras x
``--seconds`` s at ``--fps`` (default 50 x 2 x 10 s at 30 fps, ``--width`` x ``--height``
64 x 48 pixels, H.264 with a keyframe every second and at each episode start, as LeRobot's
concatenated files have), then times, as the median of ``--repeat`` runs, interleaved:

- ``mdr.verify_video(root)``: one demux pass per file, the last keyframe's frames decoded;
- the baseline: every frame of every file decoded with PyAV (``container.decode``), files
  on the same number of threads (``--workers``).

Target: ``verify_video`` at least 50x faster. Demuxing costs about the same per packet at
any resolution while decoding grows with the pixels, so the ratio does too: on 2 shared
cores it measured 7x at 64x48, 17x at 160x120, 38x at 320x240 and 57x at 640x480
(``--episodes 20 --width 640 --height 480``). Run from the repository root::

    .venv/bin/python bench/bench_verify_video.py [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402

TARGET_SPEEDUP = 50.0


def _encode(path: Path, episodes: int, frames: int, fps: int, size: tuple[int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    width, height = size
    random = np.random.default_rng(0)
    base = random.integers(0, 256, (height, width, 3), np.uint8)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(
            "libx264", rate=fps, options={"x264-params": f"keyint={fps}:min-keyint={fps}"}
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(episodes * frames):
            image = np.roll(base, i, axis=1)  # a moving picture: P-frames carry real data
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if i % frames == 0:
                frame.pict_type = av.video.frame.PictureType.I
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def write_dataset(root: Path, args: argparse.Namespace) -> list[Path]:
    """A v3.0 dataset: one data file, one episodes file, one MP4 per camera."""
    frames = args.seconds * args.fps
    cameras = [f"observation.images.cam{c}" for c in range(args.cameras)]
    info = {
        "codebase_version": "v3.0",
        "fps": args.fps,
        "total_episodes": args.episodes,
        "total_frames": args.episodes * frames,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "episode_index": {"dtype": "int64", "shape": [1]},
            "frame_index": {"dtype": "int64", "shape": [1]},
            "timestamp": {"dtype": "float32", "shape": [1]},
            **{key: {"dtype": "video", "shape": [args.height, args.width, 3]} for key in cameras},
        },
    }
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    n = args.episodes * frames
    pq.write_table(
        pa.table(
            {
                "episode_index": np.repeat(np.arange(args.episodes), frames),
                "frame_index": np.tile(np.arange(frames), args.episodes),
                "timestamp": (np.tile(np.arange(frames), args.episodes) / args.fps).astype("f4"),
                "index": np.arange(n),
            }
        ),
        root / "data" / "chunk-000" / "file-000.parquet",
    )
    starts = np.arange(args.episodes) * args.seconds
    episodes: dict[str, object] = {
        "episode_index": list(range(args.episodes)),
        "tasks": [["bench"]] * args.episodes,
        "length": [frames] * args.episodes,
        "data/chunk_index": [0] * args.episodes,
        "data/file_index": [0] * args.episodes,
    }
    for key in cameras:
        episodes[f"videos/{key}/chunk_index"] = [0] * args.episodes
        episodes[f"videos/{key}/file_index"] = [0] * args.episodes
        episodes[f"videos/{key}/from_timestamp"] = starts.astype(float).tolist()
        episodes[f"videos/{key}/to_timestamp"] = (starts + args.seconds).astype(float).tolist()
    pq.write_table(
        pa.table(episodes), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    )
    videos = [root / "videos" / key / "chunk-000" / "file-000.mp4" for key in cameras]
    for path in videos:
        _encode(path, args.episodes, frames, args.fps, (args.width, args.height))
    return videos


def decode_all(videos: list[Path], workers: int) -> int:
    def decode(path: Path) -> int:
        with av.open(str(path)) as container:
            return sum(1 for _ in container.decode(container.streams.video[0]))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(decode, videos))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temporary dataset goes")
    add_json_option(parser)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-verify-video-", dir=args.dir))
    try:
        root = work / "ds"
        started = time.perf_counter()
        videos = write_dataset(root, args)
        frames = args.episodes * args.seconds * args.fps * args.cameras
        size = sum(os.path.getsize(v) for v in videos)
        print(
            f"dataset: {args.episodes} episodes x {args.cameras} cameras x {args.seconds} s at "
            f"{args.fps} fps, {args.width}x{args.height}, {frames:,} frames, {size / 2**20:.1f} "
            f"MiB of video, written in {time.perf_counter() - started:.1f} s"
        )
        verify_s, decode_s = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            audit = mdr.verify_video(str(root), max_workers=args.workers)
            verify_s.append(time.perf_counter() - t0)
            assert audit.ok and audit.packets == frames, audit.failures[:3]
            t0 = time.perf_counter()
            decoded = decode_all(videos, args.workers)
            decode_s.append(time.perf_counter() - t0)
            assert decoded == frames, decoded
        verify_m, decode_m = statistics.median(verify_s), statistics.median(decode_s)
        speedup = decode_m / verify_m
        met = speedup >= TARGET_SPEEDUP
        print(
            f"verify_video        median {verify_m:.3f} s  runs {[round(s, 3) for s in verify_s]}"
        )
        print(
            f"decode every frame  median {decode_m:.3f} s  runs {[round(s, 3) for s in decode_s]}"
        )
        print(
            f"verify_video is {speedup:.1f}x faster than decoding every frame "
            f"(target >= {TARGET_SPEEDUP:g}x: {'met' if met else 'NOT met'}); it decoded "
            f"{audit.frames_decoded:,} of {frames:,} frames"
        )
        write_results(
            args.json,
            [
                Result(
                    workload="verify_video",
                    case=(
                        f"{args.episodes} ep x {args.cameras} cam x {args.seconds} s @ "
                        f"{args.fps} fps, {args.width}x{args.height}"
                    ),
                    refiner_s=verify_m,
                    baseline="PyAV decode of every frame",
                    baseline_s=decode_m,
                    target=f">= {TARGET_SPEEDUP:g}x faster",
                    met=met,
                    repeats=args.repeat,
                    ratio_kind="speedup",
                    extra={"frames": frames, "frames_decoded": audit.frames_decoded},
                )
            ],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

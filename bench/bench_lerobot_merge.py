"""Benchmark: ``write_lerobot`` merging per-episode MP4s into shared files, against a PyAV
stream copy of the same files, and against LeRobot building the same dataset.

Writes ``--episodes`` episodes x ``--cameras`` cameras x ``--seconds`` s at ``--fps``
(default 200 x 2 x 10 s at 30 fps, ``--width`` x ``--height`` 640 x 480, H.264 with a
keyframe every second) as a LeRobot v2.1 dataset: one MP4 per episode and camera, a data
file per episode, and ``meta/episodes_stats.jsonl`` with each episode's image statistics.
Each camera's episodes are copies of one encoded episode: remuxing costs the same whatever
the pictures show, and it keeps setting up a 200-episode source quick. Then it times, as
the median of ``--repeat`` runs, interleaved:

- ``write_lerobot``: ``read_lerobot(src, rows="episodes")`` (one ``video_clip`` per camera
  and the episode's statistics) becomes a v3.0 dataset (packets copied into shared
  per-camera files, ``meta/``), one worker; once keeping the carried statistics (the
  target's case) and once with ``recompute_stats=True`` (decoding a sample of every clip);
- the baseline: per camera, every episode's packets demuxed and muxed into one MP4 with
  PyAV (``add_stream_from_template``, times shifted), the physical lower bound of a merge.

Target: ``write_lerobot`` at most 1.5x the baseline. Unless ``--no-lerobot``, it also runs
LeRobot itself (``lerobot==0.4.2``, in the virtual environment ``scripts/lerobot_env.sh``
builds, as a subprocess) on the first ``--lerobot-episodes`` episodes: its way of building
this dataset is ``add_frame`` for every decoded frame, ``save_episode`` (which encodes the
videos) and ``finalize``; that time is reported per episode and scaled to all episodes.
Run from the repository root::

    .venv/bin/python bench/bench_lerobot_merge.py [--episodes 20] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refiner_core as mdr  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402

TARGET_SLOWDOWN = 1.5
LEROBOT_PYTHON = Path.home() / ".cache" / "refiner" / "lerobot-venv" / "bin" / "python"
# Run by LeRobot's python: decode each source episode and record it the way LeRobot does.
LEROBOT_SCRIPT = r"""
import json, sys, time
import av
from lerobot.datasets.lerobot_dataset import LeRobotDataset

spec = json.loads(sys.argv[1])
features = {
    key: {"dtype": "video", "shape": (spec["height"], spec["width"], 3),
          "names": ["height", "width", "channels"]}
    for key in spec["cameras"]
}
started = time.perf_counter()
dataset = LeRobotDataset.create("bench/merge", fps=spec["fps"], features=features,
                                root=spec["root"])
for episode in spec["episodes"]:
    frames = {}
    for key, path in episode.items():
        with av.open(path) as container:
            frames[key] = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    for i in range(len(frames[spec["cameras"][0]])):
        dataset.add_frame({**{k: v[i] for k, v in frames.items()}, "task": "bench"})
    dataset.save_episode()
dataset.finalize()
print(json.dumps({"seconds": time.perf_counter() - started}))
"""


def scene(size: tuple[int, int], seed: int) -> np.ndarray:
    """A camera-like picture: smooth shapes and light sensor noise (white noise would make
    every keyframe incompressible, which no camera records)."""
    width, height = size
    random = np.random.default_rng(seed)
    coarse = random.integers(0, 256, (height // 32 + 2, width // 32 + 2, 3)).astype(np.float32)
    rows = np.linspace(0, coarse.shape[0] - 1.001, height)
    cols = np.linspace(0, coarse.shape[1] - 1.001, width)
    r0, c0 = rows.astype(int), cols.astype(int)
    fr, fc = (rows - r0)[:, None, None], (cols - c0)[None, :, None]
    smooth = (
        coarse[r0][:, c0] * (1 - fr) * (1 - fc)
        + coarse[r0 + 1][:, c0] * fr * (1 - fc)
        + coarse[r0][:, c0 + 1] * (1 - fr) * fc
        + coarse[r0 + 1][:, c0 + 1] * fr * fc
    )
    noise = random.normal(0, 4, smooth.shape)
    return np.clip(smooth + noise, 0, 255).astype(np.uint8)


def encode_episode(path: Path, frames: int, fps: int, size: tuple[int, int], seed: int) -> None:
    """One episode: a moving camera-like picture, a keyframe a second."""
    path.parent.mkdir(parents=True, exist_ok=True)
    width, height = size
    base = scene(size, seed)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(
            "libx264",
            rate=fps,
            options={"x264-params": f"keyint={fps}:min-keyint={fps}:scenecut=0"},
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.roll(base, 4 * i, axis=1), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def write_sources(root: Path, args: argparse.Namespace) -> dict[str, list[Path]]:
    """A LeRobot v2.1 dataset at ``root``: ``videos/chunk-000/<camera>/episode_<n>.mp4``,
    a data file per episode, and ``meta/`` with each episode's image statistics in
    ``episodes_stats.jsonl`` (computed once: the episodes are copies)."""
    cameras = [f"observation.images.cam{c}" for c in range(args.cameras)]
    frames = args.seconds * args.fps
    sources: dict[str, list[Path]] = {}
    stats: dict[str, dict] = {}
    for number, key in enumerate(cameras):
        folder = root / "videos" / "chunk-000" / key
        first = folder / "episode_000000.mp4"
        encode_episode(first, frames, args.fps, (args.width, args.height), number)
        stats[key] = episode_image_stats(first, frames)
        paths = [first]
        for episode in range(1, args.episodes):
            copy = folder / f"episode_{episode:06d}.mp4"
            shutil.copyfile(first, copy)
            paths.append(copy)
        sources[key] = paths
    write_v21_meta(root, cameras, stats, args)
    return sources


def episode_image_stats(path: Path, frames: int) -> dict:
    """One episode's image statistics, from a sample of its decoded frames (as LeRobot
    samples them when it records an episode)."""
    from refiner_core.sinks.lerobot.stats import image_stats
    from refiner_core.video.concat import _Sampler

    sampler = _Sampler(frames)
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            sampler.offer(frame)
    return image_stats(np.stack(sampler.images), frames)


def write_v21_meta(
    root: Path, cameras: list[str], stats: dict[str, dict], args: argparse.Namespace
) -> None:
    frames = args.seconds * args.fps
    video = {"dtype": "video", "shape": [args.height, args.width, 3], "names": None}
    scalar = {"shape": [1], "names": None}
    info = {
        "codebase_version": "v2.1",
        "fps": args.fps,
        "chunks_size": 1000,
        "total_episodes": args.episodes,
        "total_frames": args.episodes * frames,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
        "features": {
            **dict.fromkeys(cameras, video),
            "timestamp": {"dtype": "float32", **scalar},
            "frame_index": {"dtype": "int64", **scalar},
            "episode_index": {"dtype": "int64", **scalar},
            "index": {"dtype": "int64", **scalar},
            "task_index": {"dtype": "int64", **scalar},
        },
    }
    meta, data = root / "meta", root / "data" / "chunk-000"
    meta.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    (meta / "info.json").write_text(json.dumps(info))
    (meta / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "bench"}) + "\n")
    with (
        open(meta / "episodes.jsonl", "w") as episodes,
        open(meta / "episodes_stats.jsonl", "w") as episodes_stats,
    ):
        for e in range(args.episodes):
            episodes.write(json.dumps({"episode_index": e, "tasks": ["bench"], "length": frames}))
            episodes.write("\n")
            episodes_stats.write(json.dumps({"episode_index": e, "stats": stats}) + "\n")
            table = pa.table(
                {
                    "timestamp": pa.array([k / args.fps for k in range(frames)], pa.float32()),
                    "frame_index": pa.array(range(frames), pa.int64()),
                    "episode_index": pa.array([e] * frames, pa.int64()),
                    "index": pa.array(range(e * frames, (e + 1) * frames), pa.int64()),
                    "task_index": pa.array([0] * frames, pa.int64()),
                }
            )
            pq.write_table(table, data / f"episode_{e:06d}.parquet")


def run_refiner(root: Path, out: Path, args: argparse.Namespace, recompute: bool) -> dict:
    """The v2.1 dataset's episode rows (clips and carried statistics) written as v3.0."""
    rows = mdr.read_lerobot(str(root), rows="episodes")
    sequence = rows.write_lerobot(str(out), fps=args.fps, recompute_stats=recompute)
    return dict(sequence.launch_local(num_workers=1).summary.counters)


def run_baseline(sources: dict[str, list[Path]], out: Path) -> int:
    """Per camera, every episode's packets copied into one MP4, times moved to follow on."""
    packets = 0
    for key, paths in sources.items():
        target = out / f"{key}.mp4"
        target.parent.mkdir(parents=True, exist_ok=True)
        with av.open(str(target), "w", format="mp4") as output:
            stream_out = None
            shift = 0
            for path in paths:
                with av.open(str(path)) as container:
                    stream = container.streams.video[0]
                    if stream_out is None:
                        stream_out = output.add_stream_from_template(stream, opaque=True)
                    first, last = None, 0
                    for packet in container.demux(stream):
                        if packet.dts is None:
                            continue
                        first = packet.dts if first is None else first
                        packet.pts = None if packet.pts is None else packet.pts - first + shift
                        packet.dts = packet.dts - first + shift
                        last = max(last, packet.dts + (packet.duration or 0))
                        packet.stream = stream_out
                        output.mux(packet)
                        packets += 1
                    shift = last
    return packets


def run_lerobot(sources: dict[str, list[Path]], root: Path, args: argparse.Namespace) -> float:
    episodes = [
        {key: str(paths[e]) for key, paths in sources.items()}
        for e in range(min(args.lerobot_episodes, args.episodes))
    ]
    spec = {
        "root": str(root),
        "fps": args.fps,
        "width": args.width,
        "height": args.height,
        "cameras": list(sources),
        "episodes": episodes,
    }
    done = subprocess.run(
        [str(LEROBOT_PYTHON), "-c", LEROBOT_SCRIPT, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=args.lerobot_timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"LeRobot failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-lerobot", action="store_true", help="skip LeRobot's own build")
    parser.add_argument("--lerobot-episodes", type=int, default=10)
    parser.add_argument("--lerobot-timeout", type=float, default=3600)
    parser.add_argument("--dir", default=None, help="where the temporary files go")
    add_json_option(parser)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-lerobot-merge-", dir=args.dir))
    try:
        started = time.perf_counter()
        sources = write_sources(work / "src", args)
        size = sum(p.stat().st_size for paths in sources.values() for p in paths)
        clips = args.episodes * args.cameras
        print(
            f"sources: {args.episodes} episodes x {args.cameras} cameras x {args.seconds} s at "
            f"{args.fps} fps, {args.width}x{args.height}, {clips} MP4s, {size / 2**20:.1f} MiB, "
            f"written in {time.perf_counter() - started:.1f} s; {_load()}"
        )
        kept_s: list[float] = []
        recomputed_s: list[float] = []
        baseline_s: list[float] = []
        for run in range(args.repeat):
            for recompute, times in ((False, kept_s), (True, recomputed_s)):
                out = work / f"refiner-{run}-{recompute}"
                t0 = time.perf_counter()
                counters = run_refiner(work / "src", out, args, recompute)
                times.append(time.perf_counter() - t0)
                assert counters["clips_remuxed"] == clips, counters
                assert counters["clip_stats_reused"] == (0 if recompute else clips), counters
                shutil.rmtree(out)
                if recompute:
                    continue
                out = work / f"baseline-{run}"
                t0 = time.perf_counter()
                packets = run_baseline(sources, out)
                baseline_s.append(time.perf_counter() - t0)
                assert packets == clips * args.seconds * args.fps, packets
                shutil.rmtree(out)
        baseline_m = statistics.median(baseline_s)
        refiner_m = statistics.median(kept_s)
        medians = {"kept": refiner_m, "recomputed": statistics.median(recomputed_s)}
        for name, times in (("kept", kept_s), ("recomputed", recomputed_s)):
            print(
                f"write_lerobot, statistics {name:<10} median {medians[name]:.3f} s  "
                f"runs {[round(t, 3) for t in times]}  ({medians[name] / baseline_m:.2f}x)"
            )
        print(
            f"PyAV stream copy                   median {baseline_m:.3f} s  "
            f"runs {[round(t, 3) for t in baseline_s]}"
        )
        ratio = refiner_m / baseline_m
        met = ratio <= TARGET_SLOWDOWN
        print(
            f"write_lerobot (carried statistics) is {ratio:.2f}x the stream copy "
            f"(target <= {TARGET_SLOWDOWN:g}x: {'met' if met else 'NOT met'}); {_load()}"
        )
        extra: dict[str, float | int | str] = {"clips": clips, "source_mib": round(size / 2**20, 1)}
        if not args.no_lerobot:
            measured = min(args.lerobot_episodes, args.episodes)
            try:
                lerobot_s = run_lerobot(sources, work / "lerobot", args)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                print(f"LeRobot not measured: {exc}")
                extra["lerobot"] = f"not measured: {exc}"
            else:
                scaled = lerobot_s / measured * args.episodes
                print(
                    f"LeRobot add_frame/save_episode/finalize: {lerobot_s:.1f} s for {measured} "
                    f"episodes, {scaled:.1f} s scaled to {args.episodes} "
                    f"({scaled / refiner_m:.0f}x write_lerobot's median)"
                )
                extra.update(
                    lerobot_s=round(lerobot_s, 3),
                    lerobot_episodes=measured,
                    lerobot_scaled_s=round(scaled, 3),
                )
        case = (
            f"{args.episodes} ep x {args.cameras} cam x {args.seconds} s @ "
            f"{args.fps} fps, {args.width}x{args.height}"
        )
        write_results(
            args.json,
            [
                Result(
                    workload="lerobot_merge",
                    case=f"{case}, statistics {name}",
                    refiner_s=medians[name],
                    baseline="PyAV stream-copy concatenation",
                    baseline_s=baseline_m,
                    target=f"<= {TARGET_SLOWDOWN:g}x" if name == "kept" else "reported",
                    met=medians[name] / baseline_m <= TARGET_SLOWDOWN if name == "kept" else None,
                    repeats=args.repeat,
                    extra=extra,
                )
                for name in medians
            ],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: ``read_clip`` of one episode from a large shared MP4 on S3, in bytes and time.

Builds a LeRobot-like shared video file of about ``--size-mib`` MiB (default 200): one
10 s episode of a moving camera-like picture (640x480 at 30 fps) encoded once, its
packets repeated with shifted times, one copy per episode, as ``write_lerobot``
concatenates episodes. ``--codec libsvtav1`` (the default) encodes as LeRobot does (AV1,
a keyframe every 2 frames, crf 30, preset 12); ``--codec h264`` uses x264's defaults with
a keyframe a second (B-frames, so the MP4 index holds a composition offset per frame). The file goes to a local moto S3 behind a proxy
that adds ``--latency-ms`` (20) to every request and counts the bytes it serves. Then, as
the median of ``--repeat`` runs, interleaved:

- ``mdr.read_clip`` of the middle episode straight from S3;
- the baseline: the whole file downloaded (``s3fs`` ``cat_file``), then the same clip cut
  from the downloaded bytes on local disk.

Target: the bytes ``read_clip`` transfers at most 2x the clip's packets (the bytes of its
frames; an MP4 also needs its box headers and index, ``moov``, which lists every frame of
the file: about 7 bytes a frame for LeRobot's AV1, 13 for H.264 with B-frames). The time
against the whole-file download is reported. moto keeps objects in memory (a 200 MiB object takes about 1.5 GB
while it is uploaded). Run from the repository root::

    .venv/bin/python bench/bench_read_clip.py [--size-mib 32] [--json results.json]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import s3fs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import refiner_core as mdr  # noqa: E402
from bench.bench_lerobot_merge import scene  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from tests.s3_server import S3Proxy, dummy_aws_env, start_moto  # noqa: E402

TARGET_BYTES_RATIO = 2.0
MIB = 2**20


# Encoder options: LeRobot's defaults for AV1 (lerobot.datasets.video_utils), x264's
# defaults with a keyframe a second for H.264.
CODECS = {
    "libsvtav1": lambda fps: {"g": "2", "crf": "30", "preset": "12"},
    "h264": lambda fps: {"x264-params": f"keyint={fps}:min-keyint={fps}"},
}


def encode_episode(frames: int, fps: int, size: tuple[int, int], codec: str) -> bytes:
    buffer = io.BytesIO()
    base = scene(size, 0)
    encoder = "libx264" if codec == "h264" else codec
    with av.open(buffer, "w", format="mp4") as out:
        stream = out.add_stream(encoder, rate=fps, options=CODECS[codec](fps))
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.roll(base, 4 * i, axis=1), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buffer.getvalue()


def shared_file(path: Path, episode: bytes, size_mib: float) -> tuple[int, float, int]:
    """Repeat ``episode``'s packets until the file holds about ``size_mib`` MiB; returns
    (episodes, seconds per episode, bytes of one episode's packets)."""
    with av.open(io.BytesIO(episode)) as source:
        stream = source.streams.video[0]
        packets = [p for p in source.demux(stream) if p.size]
        span = max(p.pts + (p.duration or 0) for p in packets) - min(p.pts for p in packets)
        packet_bytes = sum(p.size for p in packets)
        copies = max(3, round(size_mib * MIB / packet_bytes))
        with av.open(str(path), "w", format="mp4") as out:
            target = out.add_stream_from_template(stream, opaque=True)
            for copy in range(copies):
                for packet in packets:
                    fresh = av.Packet(bytes(packet))
                    fresh.pts = packet.pts + copy * span
                    fresh.dts = packet.dts + copy * span
                    fresh.is_keyframe = packet.is_keyframe
                    fresh.time_base = stream.time_base
                    fresh.stream = target
                    out.mux(fresh)
        return copies, float(span * stream.time_base), packet_bytes


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=200)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--codec", choices=sorted(CODECS), default="libsvtav1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temporary files go")
    add_json_option(parser)
    args = parser.parse_args()

    os.environ.update(dummy_aws_env())
    work = Path(tempfile.mkdtemp(prefix="bench-read-clip-", dir=args.dir))
    moto = start_moto()
    try:
        local = work / "file-000.mp4"
        episodes, seconds, packet_bytes = shared_file(
            local, encode_episode(300, 30, (640, 480), args.codec), args.size_mib
        )
        size = local.stat().st_size
        bucket = moto.create_bucket()
        s3fs.S3FileSystem(**moto.storage_options()).put(str(local), f"{bucket}/file-000.mp4")
        url = f"s3://{bucket}/file-000.mp4"
        middle = episodes // 2
        clip = {
            "path": url,
            "from_timestamp": middle * seconds,
            "to_timestamp": (middle + 1) * seconds,
        }
        print(
            f"file: {size / MIB:.1f} MiB of {args.codec}, {episodes} episodes of {seconds:g} s; "
            "the clip "
            f"(episode {middle}) has {packet_bytes / MIB:.2f} MiB of packets; "
            f"{args.latency_ms:g} ms per request; {_load()}"
        )
        clip_s, whole_s, served, requests = [], [], [], []
        with S3Proxy(moto.endpoint_url, latency_s=args.latency_ms / 1000) as proxy:
            options = proxy.storage_options()
            for _ in range(args.repeat):
                s3fs.S3FileSystem.clear_instance_cache()
                proxy.clear()
                t0 = time.perf_counter()
                data = mdr.read_clip(clip, options)
                clip_s.append(time.perf_counter() - t0)
                gets = proxy.records("GetObject")
                served.append(sum(r.response_bytes for r in gets))
                requests.append(len(gets))
                with av.open(io.BytesIO(data)) as check:
                    assert sum(1 for _ in check.demux(video=0)) > 1
                s3fs.S3FileSystem.clear_instance_cache()
                t0 = time.perf_counter()
                downloaded = work / "downloaded.mp4"
                downloaded.write_bytes(s3fs.S3FileSystem(**options).cat_file(url))
                mdr.read_clip({**clip, "path": str(downloaded)})
                whole_s.append(time.perf_counter() - t0)
                downloaded.unlink()
        moto.delete_bucket(bucket)
        clip_m, whole_m = statistics.median(clip_s), statistics.median(whole_s)
        bytes_ratio = max(served) / packet_bytes
        met = bytes_ratio <= TARGET_BYTES_RATIO
        print(
            f"read_clip                median {clip_m:.3f} s  runs {[round(s, 3) for s in clip_s]}"
            f"  {max(served):,} bytes in {max(requests)} requests"
        )
        print(
            f"download file, then cut  median {whole_m:.3f} s  runs "
            f"{[round(s, 3) for s in whole_s]}  {size:,} bytes"
        )
        print(
            f"read_clip transferred {bytes_ratio:.2f}x the clip's packets (target <= "
            f"{TARGET_BYTES_RATIO:g}x: {'met' if met else 'NOT met'}) and took "
            f"{clip_m / whole_m:.3f}x the whole file's time ({whole_m / clip_m:.0f}x faster); "
            f"{_load()}"
        )
        write_results(
            args.json,
            [
                Result(
                    workload="read_clip",
                    case=(
                        f"1 of {episodes} episodes from a {size / MIB:.0f} MiB {args.codec} MP4 "
                        f"on moto S3, {args.latency_ms:g} ms latency"
                    ),
                    refiner_s=clip_m,
                    baseline="download the whole file, then cut",
                    baseline_s=whole_m,
                    target=f"bytes <= {TARGET_BYTES_RATIO:g}x the clip's packets",
                    met=met,
                    repeats=args.repeat,
                    ratio_kind="speedup",
                    extra={
                        "bytes_ratio": round(bytes_ratio, 3),
                        "bytes_served": max(served),
                        "clip_packet_bytes": packet_bytes,
                        "file_bytes": size,
                        "requests": max(requests),
                    },
                )
            ],
        )
    finally:
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

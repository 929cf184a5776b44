"""Benchmark: what checksums and content dedupe cost when packing data without duplicates.

Generates ``--files`` distinct files of ``--file-kib`` KiB (8,000 x 64 KiB = 500 MiB by
default) and times, as the median of ``--repeat`` interleaved runs, ``BlobAssetConfig``
packing with ``launch_local(num_workers=1)``, in wall time and in CPU time (this process
and its workers: steadier than wall time on a shared machine):

1. plain (the baseline);
2. ``checksum="crc32c"`` (target <= 1.1x the baseline);
3. ``checksum="sha256"`` (reported, no target);
4. ``dedupe="content"`` on data that has no duplicates (target <= 1.2x the baseline).

Every run's output is checked: all assets stored, none deduplicated.

Run from the repository root::

    .venv/bin/python bench/bench_pack_digests.py
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_assets import (  # noqa: E402
    KIB,
    MIB,
    drop,
    pack,
    paths_table,
    quiet,
    ratio_line,
    settled,
)

import refiner_core as mdr  # noqa: E402

FILES_PER_FOLDER = 1000


def make_distinct_files(folder: Path, count: int, size: int) -> list[str]:
    """``count`` files of ``size`` bytes, no two alike (same sizes: only digests tell them apart)."""
    pool = os.urandom(size + count)
    paths = []
    for i in range(count):
        sub = folder / f"{i // FILES_PER_FOLDER:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        path = sub / f"clip_{i:06d}.bin"
        path.write_bytes(pool[i : i + size])
        paths.append(str(path))
    return paths


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the workers)."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def interleaved_cpu(cases: dict[str, Callable[[], None]], cleanup: Callable[[], None], repeat: int):
    """``{case: [(wall s, cpu s), ...]}`` of ``repeat`` interleaved runs of every case."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    settled(next(iter(cases.values())), cleanup)  # see bench_assets.SETTLE_S
    for _ in range(repeat):
        for name, case in cases.items():
            wall, cpu = time.perf_counter(), cpu_seconds()
            case()
            runs[name].append((time.perf_counter() - wall, cpu_seconds() - cpu))
            settled(None, cleanup)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8_000)
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="parent of the temporary data folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="refiner-bench-digests-", dir=args.dir))
    size = args.file_kib * KIB
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work skews timings)"
    )
    try:
        paths = make_distinct_files(work / "src", args.files, size)
        table = paths_table(paths, work / "input" / "paths.parquet")
        out = work / "out"

        def case(**options):
            def run() -> None:
                summary = pack(table, out, 1, mdr.BlobAssetConfig(**options))
                assert summary.counters["assets_written"] == args.files, summary
                assert summary.counters["block_bytes"] == args.files * size, summary
                assert summary.counters["assets_deduplicated"] == 0, summary

            return quiet(run)

        runs = interleaved_cpu(
            {
                "plain": case(),
                'checksum="crc32c"': case(checksum="crc32c"),
                'checksum="sha256"': case(checksum="sha256"),
                'dedupe="content"': case(dedupe="content"),
            },
            lambda: drop(out),
            args.repeat,
        )
        nbytes = args.files * size
        print(f"\npack {args.files:,} distinct files of {args.file_kib} KiB")
        wall = {n: statistics.median(w for w, _ in r) for n, r in runs.items()}
        cpu = {n: statistics.median(c for _, c in r) for n, r in runs.items()}
        for name in runs:
            each = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in runs[name])
            print(
                f"  {name:<20} wall {wall[name]:6.3f} s ({nbytes / wall[name] / MIB:5.0f} MiB/s)"
                f"  cpu {cpu[name]:6.3f} s   (wall/cpu runs: {each})"
            )
        for label, name, target in (
            ("crc32c / plain", 'checksum="crc32c"', "<= 1.1"),
            ("sha256 / plain", 'checksum="sha256"', "(reported)"),
            ("dedupe content / plain", 'dedupe="content"', "<= 1.2"),
        ):
            ratio_line(f"{label}, wall", wall[name] / wall["plain"], target)
            ratio_line(f"{label}, cpu", cpu[name] / cpu["plain"], target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

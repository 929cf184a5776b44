"""Benchmark: what checksums and content dedupe cost when packing data without duplicates.

Generates ``--files`` distinct files of ``--file-kib`` KiB (8,000 x 64 KiB = 500 MiB by
default) and times, as the median of ``--repeat`` interleaved runs, ``BlobAssetConfig``
packing with ``launch_local(num_workers=1)``:

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
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_assets import (  # noqa: E402
    KIB,
    drop,
    interleaved,
    pack,
    paths_table,
    quiet,
    ratio_line,
    report,
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
                assert summary["assets_written"] == args.files, summary
                assert summary["block_bytes"] == args.files * size, summary
                assert summary["assets_deduplicated"] == 0, summary

            return quiet(run)

        runs = interleaved(
            {
                "plain": case(),
                'checksum="crc32c"': case(checksum="crc32c"),
                'checksum="sha256"': case(checksum="sha256"),
                'dedupe="content"': case(dedupe="content"),
            },
            lambda: drop(out),
            args.repeat,
        )
        m = report(
            f"pack {args.files:,} distinct files of {args.file_kib} KiB", runs, args.files * size
        )
        ratio_line("crc32c / plain", m['checksum="crc32c"'] / m["plain"], "<= 1.1")
        ratio_line("sha256 / plain", m['checksum="sha256"'] / m["plain"], "(reported)")
        ratio_line("dedupe content / plain", m['dedupe="content"'] / m["plain"], "<= 1.2")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

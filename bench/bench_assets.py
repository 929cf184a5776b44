"""Benchmark: packing and copying media files on local disk, against cat and cp.

Generates ``--files`` files of ``--file-kib`` KiB (16,000 x 64 KiB = 1 GiB by default)
in a temporary folder and times, as the median of ``--repeat`` runs, interleaved:

1. ``BlobAssetConfig`` packing from an index of the paths in one row group with the
   default plan (four shards per worker, because the rows point at media), with
   ``launch_local(num_workers=1)`` and ``2``, against ``cat`` of the same files into
   one file (target <= 1.3x with 2 workers, <= 2x with 1);
2. ``FileAssetConfig`` copies from the same index against ``cp -r`` of the folder
   (target <= 1.5x);
3. a re-pack of the fully referenced packed output (complete-blob coalescing)
   against ``cp`` of its blocks (target <= 1.3x) and against the per-range path
   on the same data, forced with ``missing_policy="set_null"`` (reported: on local
   disk the gain is bounded by the per-reference cost; the 10x target is S3's,
   ``bench_s3_assets.py``);
4. the peak RSS of the worker processes (sum of the launcher's children, sampled
   every 10 ms) while packing ``--rss-gib`` GiB of 4 MiB files, against the same
   for a quarter of that (target < 600 MiB, and no growth with the data size).

With ``--small 1000,8000`` it runs only the small-job cases instead: packing 1,000 and
8,000 files of 16 KiB with one worker against ``cat`` of the same files (target <= 5x
for the first), and the CPU each extra file costs between the two (target <= 1.5x
``cat``'s), the load average printed beside them. Such a one-shard job runs in the
launching process (``launch_local``'s small-job rule); the same pack in a worker
process (``start_method="fork"``) is timed beside it and reported.

With ``--peer`` (the default when ``bench/peer/.venv`` exists; ``--no-peer`` skips
it) cases 1 and 2 also run the public ``macrodata-refiner`` library on the same
files, at the same worker counts, in every repeat between refiner's runs (target:
refiner >= 5x faster). It gets its own best plan: ``num_shards`` = workers over an
index of the same paths in row groups of 1,000 (it does not split one row group
between shards, so the one-row-group index would leave its second worker idle).

Run from the repository root::

    .venv/bin/python bench/bench_assets.py [--json results.json]

``--dir`` chooses where the temporary data goes (default: the system temp folder);
everything is deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import refiner_core as mdr  # noqa: E402
from bench.peer.runner import Peer, add_peer_option, peer_from  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402

KIB = 1024
MIB = 1024 * KIB
FILES_PER_FOLDER = 1000
# On a virtual machine whose balloon driver reports free memory to the host (virtio-balloon
# free page reporting), memory the guest freed more than about 2 s ago is handed back, and
# writing into it again costs a host page fault per page: 1 GiB into the page cache then
# takes 2-7 s instead of 0.4 s, for cat as for anything else (measured here: `sync; rm
# out; cat ... > out` right away 0.42-0.61 s in 5 of 6 runs, 2.5-3.2 s after 4 s idle).
# So every timed run starts right after the previous run's output was synced and
# removed, and writes into the page cache that output just gave back.
SETTLE_S = 0.0
# ext4 without a journal (this machine's disk) does not reuse an inode freed in the
# last 60 s: each new file's allocation scans past every such inode of its group, one
# buffer lookup each. Deleting the previous run's 16,000 files right before a run
# therefore makes every file-creating case slower (bench_file_creation.py measures it:
# cp -r 1.6-6.2x slower right after an rm -rf of the previous copy). So the copy
# workload empties the previous output's files (their memory is given back at once, as
# above) and moves the folder aside; the emptied folders are removed after the workload.


# data -----------------------------------------------------------------------------


def make_files(folder: Path, count: int, size: int) -> list[str]:
    """``count`` files of ``size`` random-ish bytes in sub-folders of 1,000 files."""
    pool = os.urandom(size + 4096)
    paths = []
    for i in range(count):
        sub = folder / f"{i // FILES_PER_FOLDER:03d}"
        if i % FILES_PER_FOLDER == 0:
            sub.mkdir(parents=True, exist_ok=True)
        path = sub / f"clip_{i:06d}.bin"
        start = (i * 97) % 4096
        path.write_bytes(pool[start : start + size])
        paths.append(str(path))
    return paths


def paths_table(paths: list[str], where: Path, row_group_size: int = 1000) -> str:
    """A Parquet file listing the paths (the pipeline's input), in row groups of 1,000 rows
    by default."""
    table = pa.table({"i": pa.array(range(len(paths)), pa.int64()), "video": paths})
    where.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, where, row_group_size=row_group_size)
    return str(where)


def drop(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


class Retired:
    """Output folders emptied between runs, removed together at the end (see above)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.count = 0

    def retire(self, path: Path) -> None:
        """Truncate every file below ``path`` to 0 bytes, then move ``path`` aside."""
        if not path.exists():
            return
        for folder, _, names in os.walk(path):
            for name in names:
                os.truncate(os.path.join(folder, name), 0)
        self.where.mkdir(exist_ok=True)
        self.count += 1
        path.rename(self.where / f"{path.name}-{self.count}")

    def remove(self) -> None:
        drop(self.where)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# timing ---------------------------------------------------------------------------


class RssSampler:
    """Samples the summed RSS of this process's children (the launcher's workers)."""

    def __init__(self, every: float = 0.01) -> None:
        self.every = every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


CPU_SECONDS: dict[str, list[float]] = {}  # per case: CPU time of this process and its children


def cpu_seconds() -> float:
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def timed(fn: Callable[[], object], name: str | None = None) -> float:
    """Wall seconds of ``fn``, or what it returns when it times itself (a float: the
    peer's library call, without its interpreter's start)."""
    started, cpu = time.perf_counter(), cpu_seconds()
    own = fn()
    if name is not None:
        CPU_SECONDS.setdefault(name, []).append(cpu_seconds() - cpu)
    wall = time.perf_counter() - started
    return own if isinstance(own, float) else wall


def sync() -> None:
    """Flush dirty pages so one run's writeback does not slow the next."""
    os.sync()


def median_of(runs: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(times) for name, times in runs.items()}


def interleaved(cases: dict[str, Callable[[], None]], cleanup: Callable[[], None], repeat: int):
    """Run every case ``repeat`` times, interleaved; after each, sync then clean up, and
    start the next at once (see ``SETTLE_S``). One untimed run of the first case first,
    so that the first timed run also finds a freshly freed output's memory."""
    runs: dict[str, list[float]] = {name: [] for name in cases}
    settled(next(iter(cases.values())), cleanup)
    for _ in range(repeat):
        for name, case in cases.items():
            runs[name].append(timed(case, name))
            settled(None, cleanup)
    return runs


def settled(case: Callable[[], object] | None, cleanup: Callable[[], None]) -> None:
    """Run ``case`` (untimed) if given, then flush its writes and remove its output."""
    if case is not None:
        case()
    sync()
    cleanup()
    time.sleep(SETTLE_S)


def report(title: str, runs: dict[str, list[float]], nbytes: int) -> dict[str, float]:
    medians = median_of(runs)
    print(f"\n{title}")
    for name, seconds in medians.items():
        rate = nbytes / seconds / MIB
        each = ", ".join(f"{t:.2f}" for t in runs[name])
        cpu = statistics.median(CPU_SECONDS.get(name) or [0.0])
        print(
            f"  {name:<34} {seconds:7.3f} s  {rate:8.0f} MiB/s  cpu {cpu:6.2f} s   (runs: {each})"
        )
    return medians


def ratio_line(label: str, value: float, target: str) -> None:
    print(f"  {label:<34} {value:7.2f}x   target {target}")


# cases ----------------------------------------------------------------------------


def pack(
    input_table: str, output: Path, workers: int, config, *, default_plan=False, start_method=None
) -> mdr.DatasetSummary:
    """One shard per worker, or with ``default_plan`` the plan ``read_parquet`` makes.
    A one-shard job with one worker runs in this process unless ``start_method`` is given
    (``launch_local``'s small-job rule)."""
    pipeline = mdr.read_parquet(
        input_table,
        dtypes={"video": mdr.datatype.video_path()},
        num_shards=None if default_plan else workers,
    )
    stats = pipeline.write_parquet(str(output), assets=config).launch_local(
        num_workers=workers, start_method=start_method
    )
    if not default_plan:
        assert stats.stages[0].shards == workers
    return stats.summary


def repack(packed: Path, output: Path, policy: str) -> dict:
    config = mdr.BlobAssetConfig(missing_policy=policy)
    stats = (
        mdr.read_parquet(str(packed))
        .write_parquet(str(output), assets=config)
        .launch_local(num_workers=1)
    )
    return stats.summary


def quiet(fn: Callable[[], object]) -> Callable[[], None]:
    """Run ``fn`` with stderr (the progress lines) sent to /dev/null."""

    def run() -> None:
        saved = os.dup(2)
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                fn()
            finally:
                os.dup2(saved, 2)
                os.close(saved)

    return run


def bench_pack_and_copy(
    work: Path,
    count: int,
    size: int,
    repeat: int,
    pack_only: bool = False,
    peer: Peer | None = None,
) -> list[Result]:
    src = work / "src"
    print(
        f"generating {count:,} files x {size // KIB} KiB = {count * size / MIB:,.0f} MiB in {src}"
    )
    paths = make_files(src, count, size)
    table = paths_table(paths, work / "input" / "paths.parquet")
    index = paths_table(paths, work / "input" / "index.parquet", row_group_size=count)
    nbytes = count * size
    out = work / "out"
    results: list[Result] = []
    data = f"{count:,} x {size // KIB} KiB"

    def cat() -> None:
        with open(out, "wb") as f:
            subprocess.run(["cat", *paths], stdout=f, check=True)

    def cleanup() -> None:
        drop(out)

    def checked_pack(workers: int) -> Callable[[], None]:
        def run() -> None:
            summary = pack(index, out, workers, mdr.BlobAssetConfig(), default_plan=True)
            assert (
                summary.counters["assets_written"] == count
                and summary.counters["block_bytes"] == nbytes
            )

        return quiet(run)

    def peer_case(workload: str, workers: int) -> Callable[[], float]:
        assert peer is not None
        rundir = work / "peer-runs"
        rundir.mkdir(exist_ok=True)
        # the paths table (row groups of 1,000): the peer's read_parquet does not split
        # one row group between shards, so on the one-row-group index a second worker
        # would get no rows
        args = ["--index", table, "--out", str(out), "--workers", str(workers)]
        args += ["--rows", str(count), "--rundir", str(rundir)]
        return lambda: peer.run(workload, *args)

    def peer_cases(workload: str) -> dict[str, Callable[[], float]]:
        if peer is None:
            return {}
        return {f"{peer.label}, {w} worker{'s' * (w > 1)}": peer_case(workload, w) for w in (1, 2)}

    def worker_results(
        workload: str,
        kind: str,
        what: str,
        baseline: str,
        runs: dict[str, list[float]],
        limits: dict,
    ) -> None:
        """One record per worker count: ``kind`` against ``baseline`` (and the peer), with
        every run's time beside the medians (this disk's runs swing; see SETTLE_S)."""
        m = median_of(runs)
        for workers, limit in limits.items():
            name = f"{kind}, {workers} worker{'s' * (workers > 1)}"
            ratio = m[name] / m[baseline]
            ratio_line(f"{workers} worker(s) / {baseline}", ratio, f"<= {limit}")
            fields: dict = {}
            if peer is not None:
                peer_s = m[f"{peer.label}, {workers} worker{'s' * (workers > 1)}"]
                fields = {
                    "peer": peer.label,
                    "peer_s": peer_s,
                    "peer_target": ">= 5x faster",
                    "peer_met": peer_s / m[name] >= 5,
                }
            results.append(
                Result(
                    workload=workload,
                    case=f"{data} {what}, {workers} worker{'s' * (workers > 1)}",
                    refiner_s=m[name],
                    baseline=baseline.removesuffix(" (one file)"),
                    baseline_s=m[baseline],
                    target=f"<= {limit}x",
                    met=ratio <= limit,
                    repeats=repeat,
                    extra={
                        "cpu_s": statistics.median(CPU_SECONDS[name]),
                        "runs_s": [round(t, 3) for t in runs[name]],
                        "baseline_runs_s": [round(t, 3) for t in runs[baseline]],
                    },
                    **fields,
                )
            )
            if peer is not None:
                speedup = results[-1].peer_speedup
                ratio_line(f"{peer.label} / refiner, {workers}w", speedup, ">= 5")

    runs = interleaved(
        {
            "cat (one file)": cat,
            "BlobAssetConfig, 1 worker": checked_pack(1),
            "BlobAssetConfig, 2 workers": checked_pack(2),
            **peer_cases("pack"),
        },
        cleanup,
        repeat,
    )
    m = report(f"pack {count:,} files into blocks (1-row-group index, default plan)", runs, nbytes)
    worker_results(
        "pack", "BlobAssetConfig", "into blobs", "cat (one file)", runs, {1: 2.0, 2: 1.3}
    )
    if pack_only:
        return results

    def cp() -> None:
        subprocess.run(["cp", "-r", str(src), str(out)], check=True)

    def files(workers: int) -> Callable[[], None]:
        def run() -> None:
            summary = pack(index, out, workers, mdr.FileAssetConfig(), default_plan=True)
            assert (
                summary.counters["assets_written"] == count
                and summary.counters["asset_bytes"] == nbytes
            )

        return quiet(run)

    retired = Retired(work / "retired")
    runs = interleaved(
        {
            "cp -r": cp,
            "FileAssetConfig, 1 worker": files(1),
            "FileAssetConfig, 2 workers": files(2),
            **peer_cases("copy"),
        },
        lambda: retired.retire(out),
        repeat,
    )
    retired.remove()
    m = report(f"copy {count:,} files one by one", runs, nbytes)
    worker_results("copy", "FileAssetConfig", "file per asset", "cp -r", runs, {1: 1.5, 2: 1.5})

    # re-pack: a packed dataset whose references cover every block
    packed = work / "packed"
    quiet(lambda: pack(table, packed, 1, mdr.BlobAssetConfig(target_bytes=256 * MIB)))()
    drop(src)
    block_files = sorted(str(p) for p in packed.rglob("block-*.bin"))
    print(f"\npacked source: {len(block_files)} blocks, {du(packed / 'assets') / MIB:,.0f} MiB")

    def cp_blocks() -> None:
        out.mkdir()
        subprocess.run(["cp", *block_files, str(out)], check=True)

    summaries = {}

    def re(policy: str) -> Callable[[], None]:
        def run() -> None:
            summaries[policy] = repack(packed, out, policy)

        return quiet(run)

    runs = interleaved(
        {
            "cp of the blocks": cp_blocks,
            "re-pack, coalesced": re("error"),
            "re-pack, per range (set_null)": re("set_null"),
        },
        cleanup,
        repeat,
    )
    m = report("re-pack a fully referenced dataset", runs, nbytes)
    coalesced, ranged = summaries["error"], summaries["set_null"]
    assert (
        coalesced.counters["blobs_coalesced"] == len(block_files)
        and coalesced.counters["ranges_copied"] == 0
    )
    assert ranged.counters["blobs_coalesced"] == 0 and ranged.counters["ranges_copied"] == count
    ratio = m["re-pack, coalesced"] / m["cp of the blocks"]
    ratio_line("coalesced / cp", ratio, "<= 1.3")
    gain = m["re-pack, per range (set_null)"] / m["re-pack, coalesced"]
    ratio_line("per range / coalesced", gain, "(reported; >= 10 on S3)")
    results += [
        Result(
            workload="repack",
            case=f"{data} fully referenced, coalesced, local disk",
            refiner_s=m["re-pack, coalesced"],
            baseline="cp of the blocks",
            baseline_s=m["cp of the blocks"],
            target="<= 1.3x",
            met=ratio <= 1.3,
            repeats=repeat,
            extra={
                "blocks": len(block_files),
                "runs_s": [round(t, 3) for t in runs["re-pack, coalesced"]],
                "baseline_runs_s": [round(t, 3) for t in runs["cp of the blocks"]],
            },
        ),
        Result(
            workload="repack",
            case=f"{data} coalesced vs per range (set_null), local disk",
            refiner_s=m["re-pack, coalesced"],
            baseline="per-range re-pack",
            baseline_s=m["re-pack, per range (set_null)"],
            target="reported",
            met=None,
            repeats=repeat,
            ratio_kind="speedup",
        ),
    ]
    drop(packed)
    drop(work / "input")
    return results


def bench_small_packs(work: Path, counts: list[int], size: int, repeat: int) -> list[Result]:
    """Small jobs: pack ``counts`` files of ``size`` bytes with one worker against ``cat``
    of the same files, interleaved in one run, both from the page cache (the untimed
    first ``cat`` reads every file in). Wall and CPU (this process and its children)
    per case; the CPU each extra file costs is the slope between the first two counts."""
    results: list[Result] = []
    cpu: dict[int, tuple[float, float]] = {}  # count -> (cat, pack) median CPU seconds
    out = work / "small-out"
    for count in counts:
        src = work / f"small-src-{count}"
        paths = make_files(src, count, size)
        index = paths_table(paths, work / f"small-input-{count}" / "index.parquet", count)
        data = f"{count:,} x {size // KIB} KiB"
        cat_name, pack_name = f"cat, {data}", f"pack, {data}, 1 worker"
        forked_name = f"pack, {data}, worker process"

        def cat(paths: list[str] = paths) -> None:
            with open(out, "wb") as f:
                subprocess.run(["cat", *paths], stdout=f, check=True)

        def packed(index: str = index, count: int = count) -> None:
            summary = pack(index, out, 1, mdr.BlobAssetConfig(), default_plan=True)
            assert summary.counters["assets_written"] == count

        def forked(index: str = index, count: int = count) -> None:
            summary = pack(
                index, out, 1, mdr.BlobAssetConfig(), default_plan=True, start_method="fork"
            )
            assert summary.counters["assets_written"] == count

        print(f"\nload average before: {os.getloadavg()[0]:.1f}")
        cases = {cat_name: cat, pack_name: quiet(packed), forked_name: quiet(forked)}
        runs = interleaved(cases, lambda: drop(out), repeat)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        m = report(f"small pack: {data}, one worker, against cat", runs, count * size)
        ratio = m[pack_name] / m[cat_name]
        ratio_line("pack / cat (wall)", ratio, "<= 5" if count == counts[0] else "(reported)")
        ratio_line(
            "pack in a worker process / cat (wall)", m[forked_name] / m[cat_name], "(reported)"
        )
        cpu[count] = (
            statistics.median(CPU_SECONDS[cat_name]),
            statistics.median(CPU_SECONDS[pack_name]),
        )
        ratio_line("pack / cat (CPU)", cpu[count][1] / cpu[count][0], "(reported)")
        results.append(
            Result(
                workload="small-pack",
                case=f"{data} into blobs, 1 worker",
                refiner_s=m[pack_name],
                baseline="cat",
                baseline_s=m[cat_name],
                target="<= 5x" if count == counts[0] else "reported",
                met=ratio <= 5 if count == counts[0] else None,
                repeats=repeat,
                extra={
                    "cpu_s": cpu[count][1],
                    "baseline_cpu_s": cpu[count][0],
                    "load": round(os.getloadavg()[0], 1),
                    "runs_s": [round(t, 3) for t in runs[pack_name]],
                    "baseline_runs_s": [round(t, 3) for t in runs[cat_name]],
                    "worker_process_s": m[forked_name],
                    "worker_process_cpu_s": statistics.median(CPU_SECONDS[forked_name]),
                },
            )
        )
        drop(src)
        drop(work / f"small-input-{count}")
    if len(counts) >= 2:
        small, large = counts[0], counts[1]
        extra_files = large - small
        cat_each = (cpu[large][0] - cpu[small][0]) / extra_files
        pack_each = (cpu[large][1] - cpu[small][1]) / extra_files
        print(
            f"\nCPU per extra file ({small:,} -> {large:,}): cat {cat_each * 1e6:.1f} us, "
            f"pack {pack_each * 1e6:.1f} us"
        )
        ratio_line("pack / cat (CPU per file)", pack_each / cat_each, "<= 1.5")
        results.append(
            Result(
                workload="small-pack",
                case=f"CPU per file, {small:,} -> {large:,} x {size // KIB} KiB, 1 worker",
                refiner_s=pack_each,
                baseline="cat",
                baseline_s=cat_each,
                target="<= 1.5x",
                met=pack_each / cat_each <= 1.5,
                repeats=repeat,
                extra={"unit": "CPU seconds per file"},
            )
        )
    return results


def bench_rss(work: Path, gib: float) -> list[Result]:
    size = 4 * MIB
    print(f"\npeak worker RSS while packing {size // MIB} MiB files (BlobAssetConfig, 1 worker)")
    peaks, times = {}, {}
    for total in (int(gib * 1024 * MIB) // 4, int(gib * 1024 * MIB)):
        count = total // size
        src = work / "rss-src"
        paths = make_files(src, count, size)
        table = paths_table(paths, work / "rss-input" / "paths.parquet")
        out = work / "rss-out"
        with RssSampler() as sampler:
            # a worker process, whose RSS the sampler sums: start_method keeps the worker
            summary = quiet(
                lambda t=table, o=out: pack(t, o, 1, mdr.BlobAssetConfig(), start_method="fork")
            )
            started = time.perf_counter()
            summary()
            seconds = time.perf_counter() - started
        peaks[total] = sampler.peak
        times[total] = seconds
        print(
            f"  {total / MIB / 1024:5.2f} GiB ({count:,} files): peak {sampler.peak / MIB:6.0f} MiB "
            f"in {seconds:.1f} s   target < 600 MiB"
        )
        drop(out)
        drop(src)
        drop(work / "rss-input")
        sync()
    small, large = sorted(peaks)
    growth = (peaks[large] - peaks[small]) / MIB
    print(
        f"  growth from {small / MIB / 1024:.0f} to {large / MIB / 1024:.0f} GiB: {growth:+.0f} MiB"
    )
    return [
        Result(
            workload="rss",
            case=f"peak worker RSS packing {total / 2**30:g} GiB of 4 MiB files, 1 worker",
            refiner_s=times[total],
            baseline="",
            baseline_s=None,
            target="< 600 MiB" + (", flat in data size" if total == large else ""),
            met=peaks[total] / MIB < 600 and (total == small or growth < 0.25 * peaks[small] / MIB),
            repeats=1,
            ratio=peaks[total] / MIB,
            ratio_kind="value",
            extra={"unit": "MiB", "peak_rss_mib": round(peaks[total] / MIB, 1)}
            | ({"growth_mib": round(growth, 1)} if total == large else {}),
        )
        for total in (small, large)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=16_000)
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rss-gib", type=float, default=4, help="0 skips the memory run")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--pack-only", action="store_true", help="only the packing cases of the speed run"
    )
    parser.add_argument(
        "--small",
        type=lambda text: [int(n) for n in text.split(",")],
        default=None,
        metavar="N,M",
        help="only the small-job cases: pack N and M files of 16 KiB against cat "
        "(e.g. 1000,8000), with the CPU per file between them",
    )
    parser.add_argument("--dir", default=None, help="parent of the temporary data folder")
    add_peer_option(parser)
    add_json_option(parser)
    args = parser.parse_args()
    peer = peer_from(args, parser)
    results: list[Result] = []
    work = Path(tempfile.mkdtemp(prefix="refiner-bench-assets-", dir=args.dir))
    print(f"data folder: {work} ({shutil.disk_usage(work).free / 2**30:,.0f} GiB free)")
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work skews timings)"
    )
    try:
        if args.small:
            write_results(args.json, bench_small_packs(work, args.small, 16 * KIB, args.repeat))
            return
        if not args.skip_speed:
            results += bench_pack_and_copy(
                work,
                args.files,
                args.file_kib * KIB,
                args.repeat,
                pack_only=args.pack_only,
                peer=peer,
            )
        if args.rss_gib:
            results += bench_rss(work, args.rss_gib)
        write_results(args.json, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if peer is not None:
            peer.close()


if __name__ == "__main__":
    main()

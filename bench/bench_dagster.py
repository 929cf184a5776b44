"""Benchmark: the fixed cost Dagster adds per step over calling refiner_core directly.

Two measurements, each the median of ``--repeat`` runs, the Dagster side and the
direct side alternating (after one untimed warm-up of each, so imports, the demo
data and the first worker start are not counted)::

    .venv/bin/python bench/bench_dagster.py --repeat 3

1. The demo: its ``demo_refresh`` job (every demo dataset, finalization and check,
   as ``scripts/demo.sh`` materializes them) executed in process on a fresh
   temporary Dagster instance, against the same refiner_core writes called directly
   (``launch_local`` of the same pipelines with the same asset configs and worker
   counts, each reading the previous one's output, into a temporary folder).
2. One packed dataset: ``--files`` files of ``--file-kib`` KiB (4,000 x 64 KiB) listed
   in a Parquet index; an asset returns ``mdr.read_parquet(index)`` and the
   ``RefinerBlobIOManager`` packs it, then its finalization asset publishes it
   (``dg.materialize``), against ``write_parquet(..., assets=BlobAssetConfig())
   .launch_local()`` of the same pipeline.

The fixed cost per step is ``(dagster - direct) / steps`` with ``steps`` the steps
the Dagster run executed (assets and checks); target <= 2 s. The direct side does
not run the checks or the publish: they are part of what Dagster adds. Where data
lands: a temporary folder, deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORK = Path(tempfile.mkdtemp(prefix="refiner-bench-dagster-"))
os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"
os.environ["DAGSTER_HOME"] = str(WORK / "dagster_home")
os.environ["REFINER_DEMO_DATA_DIR"] = str(WORK / "demo_data")
(WORK / "dagster_home").mkdir()
(WORK / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")

import dagster as dg  # noqa: E402

import refiner_core as mdr  # noqa: E402
from bench.bench_assets import make_files, paths_table, quiet  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.cpus import available_cpus  # noqa: E402
from refiner_dagster import RefinerBlobIOManager, build_finalization_asset  # noqa: E402

KIB = 1024
TARGET_S = 2.0


def fresh_instance() -> dg.DagsterInstance:
    """A new instance (and so new IO-manager storage) under the work folder."""
    return dg.DagsterInstance.local_temp(tempfile.mkdtemp(prefix="instance-", dir=WORK))


def steps_of(result) -> int:
    assert result.success
    return len(result.get_step_success_events())


# 1. the demo ---------------------------------------------------------------------------


def demo_dagster() -> int:
    from refiner_dagster.demo.definitions import defs

    job = defs.resolve_job_def("demo_refresh")
    with fresh_instance() as instance:
        return steps_of(job.execute_in_process(instance=instance))


def demo_direct() -> None:
    """The refiner_core work of ``demo_refresh`` without Dagster: the same pipelines and
    asset configs, each dataset read from the previous one's output."""
    from refiner_dagster.demo import definitions as demo
    from refiner_dagster.demo.thumbnails import thumbnails

    out = Path(tempfile.mkdtemp(prefix="direct-", dir=WORK))
    workers = available_cpus()

    def write(pipeline: mdr.Pipeline, name: str, config) -> mdr.DatasetSummary:
        stats = pipeline.write_parquet(str(out / name), assets=config).launch_local(
            num_workers=workers
        )
        return stats.summary

    rows = demo.source_pipeline().materialize()  # the episodes asset
    assert len(rows) == 24
    labeled = (
        demo.source_pipeline(num_shards=1)
        .map_async(demo.label_episode, max_in_flight=8)
        .batch_map_async(demo.score_batch, batch_size=8, max_in_flight=2)
    )
    written = write(labeled, "labeled", mdr.FileAssetConfig())
    assert written.counters["assets_written"] > 0, written
    small = mdr.BlobAssetConfig(target_bytes=demo.PACKED_TARGET_BYTES)
    packed = write(mdr.read_parquet(str(out / "labeled")), "packed", small)
    assert packed.counters["assets_written"] > 0, packed
    write(mdr.read_parquet(str(out / "packed")), "repacked", mdr.BlobAssetConfig())
    gap = write(
        demo.source_pipeline().map(demo.with_gap),
        "gap",
        mdr.BlobAssetConfig(missing_policy="set_null"),
    )
    assert gap.counters["missing_assets"] == 1, gap
    write(thumbnails(), "thumbnails", small)
    shutil.rmtree(out)


# 2. one packed dataset -----------------------------------------------------------------


def packed_assets(index: str) -> list:
    @dg.asset(io_manager_key="refiner_blobs")
    def bench_packed() -> mdr.Pipeline:
        return mdr.read_parquet(index, dtypes={"video": mdr.datatype.video_path()})

    return [bench_packed, build_finalization_asset(bench_packed)]


def packed_dagster(assets: list, count: int) -> int:
    with fresh_instance() as instance:
        result = dg.materialize(
            assets, instance=instance, resources={"refiner_blobs": RefinerBlobIOManager()}
        )
    return steps_of(result)


def packed_direct(index: str, count: int) -> None:
    out = Path(tempfile.mkdtemp(prefix="direct-", dir=WORK))
    pipeline = mdr.read_parquet(index, dtypes={"video": mdr.datatype.video_path()})
    stats = pipeline.write_parquet(str(out), assets=mdr.BlobAssetConfig()).launch_local(
        num_workers=available_cpus()
    )
    assert stats.summary.counters["assets_written"] == count, stats.summary
    shutil.rmtree(out)


# runs ------------------------------------------------------------------------------


def alternate(
    dagster: Callable[[], int], direct: Callable[[], None], repeat: int
) -> tuple[float, float, int, list[float], list[float]]:
    """Warm both up, then ``repeat`` rounds, the side that goes first swapping each round."""
    steps = quiet_steps(dagster)
    quiet(direct)()
    times: dict[str, list[float]] = {"dagster": [], "direct": []}
    for i in range(repeat):
        order = ("dagster", "direct") if i % 2 == 0 else ("direct", "dagster")
        for side in order:
            started = time.perf_counter()
            if side == "dagster":
                steps = quiet_steps(dagster)
            else:
                quiet(direct)()
            times[side].append(time.perf_counter() - started)
    return (
        statistics.median(times["dagster"]),
        statistics.median(times["direct"]),
        steps,
        times["dagster"],
        times["direct"],
    )


def quiet_steps(fn: Callable[[], int]) -> int:
    box: list[int] = []
    quiet(lambda: box.append(fn()))()
    return box[0]


def record(case: str, dagster_s: float, direct_s: float, steps: int, repeat: int) -> Result:
    per_step = (dagster_s - direct_s) / steps
    print(
        f"  {case}: dagster {dagster_s:.2f} s, direct {direct_s:.2f} s, {steps} steps, "
        f"fixed cost {per_step:.3f} s per step (target <= {TARGET_S:g} s)"
    )
    return Result(
        workload="dagster",
        case=case,
        refiner_s=dagster_s,
        baseline="refiner_core directly",
        baseline_s=direct_s,
        target=f"<= {TARGET_S:g} s/step",
        met=per_step <= TARGET_S,
        repeats=repeat,
        ratio=per_step,
        ratio_kind="value",
        extra={"unit": "s/step", "steps": steps, "fixed_cost_per_step_s": round(per_step, 3)},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4000)
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-packed", action="store_true")
    add_json_option(parser)
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work skews timings)"
    )
    results: list[Result] = []
    try:
        if not args.skip_demo:
            d, r, steps, dt, rt = alternate(demo_dagster, demo_direct, args.repeat)
            print(f"demo runs: dagster {dt}, direct {rt}")
            results.append(record("demo materialization (demo_refresh)", d, r, steps, args.repeat))
        if not args.skip_packed:
            paths = make_files(WORK / "src", args.files, args.file_kib * KIB)
            index = paths_table(paths, WORK / "index" / "paths.parquet", row_group_size=len(paths))
            assets = packed_assets(index)
            d, r, steps, dt, rt = alternate(
                lambda: packed_dagster(assets, args.files),
                lambda: packed_direct(index, args.files),
                args.repeat,
            )
            print(f"packed runs: dagster {dt}, direct {rt}")
            case = f"{args.files:,} x {args.file_kib} KiB packed through RefinerBlobIOManager"
            results.append(record(case, d, r, steps, args.repeat))
        write_results(args.json, results)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: Dagster's fixed cost of a 4-step fan-out dataset against the IO-manager path.

The same dataset (``--rows`` rows in 4 shards, a small media file each, packed into
blocks) is materialized, interleaved, ``--repeat`` times each way with the
multiprocess executor on a real Dagster instance (SQLite, temporary DAGSTER_HOME):

1. the IO-manager path: one asset step whose IO manager runs ``launch_local`` with
   ``num_workers=4`` and finalizes inline;
2. ``build_dataset_asset(max_tasks=4)``: plan -> 4 write steps -> finalize, each a
   Dagster step process, step outputs through ``fs_io_manager``.

It prints the median wall time of each, the difference (the fan-out's fixed cost:
three more step processes and the step outputs) and the ratio. There is no target:
the cost is per run, not per row, and it is what pays for spreading the write steps
over machines.

It also times the fan-out's plan step alone, cutting a one-row-group index of
1,000,000 rows into ``--plan-shards`` shards (10,000, the limit): opening the version
folder, planning the shards and grouping them into at most ``max_tasks`` (64) write
steps. Target: < 2 s.

Run from the repository root::

    .venv/bin/python bench/bench_fanout.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

import dagster as dg  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import refiner_core as mdr  # noqa: E402
import refiner_dagster as rd  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402

MEDIA_ENV = "REFINER_BENCH_FANOUT_MEDIA"
ROWS_ENV = "REFINER_BENCH_FANOUT_ROWS"
BASE_ENV = "REFINER_BENCH_FANOUT_BASE"


def pipeline(context=None) -> mdr.Pipeline:
    media, rows = os.environ[MEDIA_ENV], int(os.environ[ROWS_ENV])
    items = [{"i": i, "image": os.path.join(media, f"{i % 64:03d}.bin")} for i in range(rows)]
    return mdr.from_items(
        items, items_per_shard=-(-rows // 4), dtypes={"image": mdr.datatype.image_path()}
    )


@dg.asset(io_manager_key="refiner")
def one_step(context) -> mdr.Pipeline:
    return pipeline(context)


fanned = rd.build_dataset_asset(pipeline, name="fanned", max_tasks=4)
EXECUTOR = dg.multiprocess_executor.configured(
    {"max_concurrent": 4, "start_method": {"forkserver": {"preload_modules": [__name__]}}}
)


def _defs() -> dg.Definitions:
    base = os.environ[BASE_ENV]
    return dg.Definitions(
        assets=[one_step, fanned],
        jobs=[
            dg.define_asset_job("one_step_job", selection=[one_step], executor_def=EXECUTOR),
            dg.define_asset_job("fanned_job", selection=[fanned], executor_def=EXECUTOR),
        ],
        resources={
            "refiner": rd.RefinerBlobIOManager(base_url=base, num_workers=4, finalize_inline=True)
        },
    )


def one_step_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("one_step_job")


def fanned_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("fanned_job")


def _timed(job_fn, instance) -> float:
    started = time.perf_counter()
    with dg.execute_job(dg.reconstructable(job_fn), instance=instance) as result:
        if not result.success:
            raise RuntimeError(f"{job_fn.__name__} failed")
    return time.perf_counter() - started


INDEX_ENV = "REFINER_BENCH_FANOUT_INDEX"
SHARDS_ENV = "REFINER_BENCH_FANOUT_SHARDS"


def _many(context) -> mdr.Pipeline:
    return mdr.read_parquet(os.environ[INDEX_ENV], num_shards=int(os.environ[SHARDS_ENV]))


def time_plan_step(shards: int, base: str, instance: dg.DagsterInstance) -> tuple[float, int]:
    """Seconds of one plan step cutting the index into ``shards`` shards, and its write steps."""
    os.environ[SHARDS_ENV] = str(shards)
    asset = rd.build_dataset_asset(_many, name="many")
    plan_op = asset.node_def.node_dict["many_plan"].definition
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=base)}
    with dg.build_op_context(resources=resources, instance=instance) as context:
        started = time.perf_counter()
        outputs = list(plan_op(context, rd.FanoutConfig()))
        elapsed = time.perf_counter() - started
    plan = outputs[0].value
    if plan.shards != shards or sum(len(o.value.shards) for o in outputs[1:]) != shards:
        raise RuntimeError(f"the plan step planned {plan.shards} shards, expected {shards}")
    return elapsed, plan.tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plan-shards", type=int, default=10_000)
    add_json_option(parser)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="refiner-bench-fanout-")
    try:
        media = os.path.join(root, "media")
        os.makedirs(media)
        for i in range(64):
            with open(os.path.join(media, f"{i:03d}.bin"), "wb") as f:
                f.write(os.urandom(16 * 1024))
        os.environ.update(
            {MEDIA_ENV: media, ROWS_ENV: str(args.rows), BASE_ENV: os.path.join(root, "out")}
        )
        home = os.path.join(root, "home")
        os.makedirs(home)
        with open(os.path.join(home, "dagster.yaml"), "w") as f:
            f.write("telemetry:\n  enabled: false\n")
        times: dict[str, list[float]] = {"io_manager": [], "fan_out": []}
        with dg.DagsterInstance.local_temp(tempdir=home) as instance:
            _timed(one_step_job, instance)  # warm-up: imports, forkserver, SQLite
            for _ in range(args.repeat):
                times["io_manager"].append(_timed(one_step_job, instance))
                times["fan_out"].append(_timed(fanned_job, instance))
        one, fan = (statistics.median(times[k]) for k in ("io_manager", "fan_out"))
        print(f"rows={args.rows}, 4 shards, median of {args.repeat}")
        print(f"IO-manager path (1 step, launch_local 4 workers): {one:6.2f} s")
        print(f"fan-out (plan + 4 write steps + finalize):        {fan:6.2f} s")
        print(f"fixed cost of the fan-out: {fan - one:+.2f} s per run, ratio {fan / one:.2f}x")

        index = os.path.join(root, "index.parquet")
        rows = pa.table({"i": pa.array(range(1_000_000), pa.int64())})
        pq.write_table(rows, index, row_group_size=len(rows))  # one row group
        os.environ[INDEX_ENV] = index
        with dg.DagsterInstance.local_temp(tempdir=home) as instance:
            plans = [
                time_plan_step(args.plan_shards, os.path.join(root, f"plan-{i}"), instance)
                for i in range(args.repeat)
            ]
        plan_s = statistics.median(p[0] for p in plans)
        tasks = plans[0][1]
        print(
            f"plan step, {args.plan_shards:,} shards -> {tasks} write steps: {plan_s:.2f} s "
            "(target < 2 s)"
        )
        os.environ[ROWS_ENV] = str(args.rows)
        write_results(
            args.json,
            [
                Result(
                    workload="dagster",
                    case="4-step fan-out vs the IO-manager path (fixed cost per run)",
                    refiner_s=fan,
                    baseline="IO-manager path, launch_local 4 workers",
                    baseline_s=one,
                    target="reported",
                    met=None,
                    repeats=args.repeat,
                    extra={"fixed_cost_s": round(fan - one, 3)},
                ),
                Result(
                    workload="planning",
                    case=f"fan-out plan step, {args.plan_shards:,} shards -> {tasks} write steps",
                    refiner_s=plan_s,
                    baseline="target",
                    baseline_s=2.0,
                    target="< 2 s",
                    met=plan_s < 2.0,
                    repeats=args.repeat,
                    ratio_kind="value",
                ),
            ],
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

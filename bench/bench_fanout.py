"""Benchmark: Dagster's fixed cost of a 4-step fan-out dataset against the IO-manager path.

The same dataset (``--rows`` rows in 4 shards, a small media file each, packed into
blocks) is materialized, interleaved, ``--repeat`` times each way with the
multiprocess executor on a real Dagster instance (SQLite, temporary DAGSTER_HOME):

1. the IO-manager path (the baseline): one asset step whose IO manager runs
   ``launch_local`` with ``num_workers=4`` and finalizes inline, on the forkserver
   executor of 3.;
2. ``build_dataset_asset(max_tasks=4)``: plan -> 4 write steps -> finalize, each a
   Dagster step process, step outputs through ``fs_io_manager``, on the executor's
   default start method (``spawn``: every step a fresh interpreter);
3. the same fan-out with ``start_method: {forkserver: {preload_modules: [...]}}``
   (``--preload``, default ``refiner_dagster.preload`` and this script's module, from
   which the jobs are reconstructed by name, as from a code location):
   every step forked from a server that imported them once;
4. the same on the forkserver with ``min_shards_per_task=4``: the plan step makes one
   write step of the 4 shards (plan -> write -> finalize);
5. the floor: jobs of no-op steps on the same forkserver executor, shaped like 3.
   (1 -> 4 -> 1) and like 4. (3 in a row): what Dagster's per-step machinery (process
   start, opening the instance, event writes, the executor's loop) costs with no work.

It prints the median wall time of each side and its ratio to the IO-manager path
(target for 3.: <= 1.5x), and where a fan-out step's start goes, from the run's event
log (medians over the repeats): launch (``STEP_WORKER_STARTING`` to
``STEP_WORKER_STARTED``: the process start and opening the run's instance), prepare
(to ``STEP_START``: rebuilding the job and its execution plan, resources) and run
(to ``STEP_SUCCESS``). ``--preload bench.bench_fanout`` measures the forkserver as it was
before ``refiner_dagster.preload`` (the script's own imports only).

It also times the fan-out's plan step alone, cutting a one-row-group index of
1,000,000 rows into ``--plan-shards`` shards (10,000, the limit): opening the version
folder, planning the shards and grouping them into at most ``max_tasks`` (64) write
steps. Target: < 2 s.

Run from the repository root::

    .venv/bin/python bench/bench_fanout.py --repeat 3
"""

from __future__ import annotations

import argparse
import importlib
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
fanned_small = rd.build_dataset_asset(
    pipeline, name="fanned_small", max_tasks=4, min_shards_per_task=4
)
PRELOAD_ENV = "REFINER_BENCH_FANOUT_PRELOAD"
# the jobs are reconstructed from this module by name, as Dagster does for a code location
LOCATION = "bench.bench_fanout"
DEFAULT_PRELOAD = f"refiner_dagster.preload,{LOCATION}"
SPAWN = dg.multiprocess_executor.configured({"max_concurrent": 4})


def _forkserver() -> dg.ExecutorDefinition:
    preload = os.environ.get(PRELOAD_ENV, DEFAULT_PRELOAD).split(",")
    return dg.multiprocess_executor.configured(
        {"max_concurrent": 4, "start_method": {"forkserver": {"preload_modules": preload}}}
    )


def _defs() -> dg.Definitions:
    base = os.environ[BASE_ENV]
    forkserver = _forkserver()
    return dg.Definitions(
        assets=[one_step, fanned, fanned_small],
        jobs=[
            dg.define_asset_job("one_step_job", selection=[one_step], executor_def=forkserver),
            dg.define_asset_job("fanned_spawn_job", selection=[fanned], executor_def=SPAWN),
            dg.define_asset_job("fanned_job", selection=[fanned], executor_def=forkserver),
            dg.define_asset_job("small_job", selection=[fanned_small], executor_def=forkserver),
        ],
        resources={
            "refiner": rd.RefinerBlobIOManager(base_url=base, num_workers=4, finalize_inline=True)
        },
    )


@dg.op(out=dg.Out(dg.Nothing))
def floor_plan() -> None:
    """A no-op step: what Dagster's per-step machinery costs on its own."""


@dg.op(ins={"after": dg.In(dg.Nothing)}, out=dg.Out(dg.Nothing))
def floor_write() -> None:
    """A no-op step."""


@dg.op(ins={"after": dg.In(dg.Nothing)})
def floor_finalize() -> None:
    """A no-op step."""


@dg.graph
def floor_fanout() -> None:
    planned = floor_plan()
    floor_finalize([floor_write.alias(f"w{i}_write")(planned) for i in range(4)])


@dg.graph
def floor_chain() -> None:
    floor_finalize(floor_write(floor_plan()))


def floor_fanout_job() -> dg.JobDefinition:
    return floor_fanout.to_job(name="floor_fanout_job", executor_def=_forkserver())


def floor_chain_job() -> dg.JobDefinition:
    return floor_chain.to_job(name="floor_chain_job", executor_def=_forkserver())


def one_step_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("one_step_job")


def fanned_spawn_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("fanned_spawn_job")


def fanned_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("fanned_job")


def small_job() -> dg.JobDefinition:
    return _defs().resolve_job_def("small_job")


SIDES = {
    "io_manager": ("IO-manager path (1 step, launch_local 4 workers)", one_step_job),
    "fan_out_spawn": ("fan-out, 4 write steps, spawn (default)", fanned_spawn_job),
    "fan_out_forkserver": ("fan-out, 4 write steps, forkserver + preload", fanned_job),
    "fan_out_small": ("fan-out, min_shards_per_task=4: 1 write step, forkserver", small_job),
    "floor_fanout": ("floor: no-op steps 1 -> 4 -> 1, forkserver + preload", floor_fanout_job),
    "floor_chain": ("floor: 3 no-op steps in a row, forkserver + preload", floor_chain_job),
}
PHASES = ("STEP_WORKER_STARTING", "STEP_WORKER_STARTED", "STEP_START", "STEP_SUCCESS")


def step_phases(instance: dg.DagsterInstance, run_id: str) -> dict[str, dict[str, float]]:
    """Seconds of launch, prepare and run of each step kind (plan, write, finalize) of a run,
    from its event log; the mean over a kind's steps."""
    seen: dict[str, dict[str, float]] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if entry.step_key and event is not None and event.event_type_value in PHASES:
            seen.setdefault(entry.step_key, {})[event.event_type_value] = entry.timestamp
    kinds: dict[str, list[dict[str, float]]] = {}
    for key, t in seen.items():
        if len(t) != len(PHASES):
            continue
        kind = key.split(".")[-1].split("[")[0].rsplit("_", 1)[-1]
        kinds.setdefault(kind, []).append(
            {
                "launch": t["STEP_WORKER_STARTED"] - t["STEP_WORKER_STARTING"],
                "prepare": t["STEP_START"] - t["STEP_WORKER_STARTED"],
                "run": t["STEP_SUCCESS"] - t["STEP_START"],
            }
        )
    return {
        kind: {p: statistics.mean(s[p] for s in steps) for p in ("launch", "prepare", "run")}
        for kind, steps in kinds.items()
    }


def _timed(job_fn, instance) -> tuple[float, str]:
    started = time.perf_counter()
    with dg.execute_job(dg.reconstructable(job_fn), instance=instance) as result:
        if not result.success:
            raise RuntimeError(f"{job_fn.__name__} failed")
        run_id = result.run_id
    return time.perf_counter() - started, run_id


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
    parser.add_argument(
        "--preload",
        default=None,
        help="comma-separated forkserver preload_modules (default: refiner_dagster.preload and "
        f"{LOCATION}; '{LOCATION}' alone gives the script's own imports only)",
    )
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
        if args.preload:
            os.environ[PRELOAD_ENV] = args.preload
        times: dict[str, list[float]] = {side: [] for side in SIDES}
        phases: dict[str, list[dict[str, dict[str, float]]]] = {side: [] for side in SIDES}
        location = importlib.import_module(LOCATION)
        with dg.DagsterInstance.local_temp(tempdir=home) as instance:
            _timed(location.one_step_job, instance)  # warm-up: imports, forkserver, SQLite
            for _ in range(args.repeat):
                for side, (_, job_fn) in location.SIDES.items():
                    elapsed, run_id = _timed(job_fn, instance)
                    times[side].append(elapsed)
                    phases[side].append(step_phases(instance, run_id))
        medians = {side: statistics.median(times[side]) for side in SIDES}
        one = medians["io_manager"]
        preload = os.environ.get(PRELOAD_ENV, DEFAULT_PRELOAD)
        print(f"rows={args.rows}, 4 shards, median of {args.repeat}; forkserver preload: {preload}")
        for side, (label, _) in SIDES.items():
            runs = " ".join(f"{t:.2f}" for t in times[side])
            print(f"{label:58s} {medians[side]:6.2f} s  {medians[side] / one:5.2f}x  ({runs})")
        print("step start, median seconds per step kind: launch / prepare / run")
        for side in SIDES:
            kinds = sorted({k for run in phases[side] for k in run})
            cells = []
            for kind in kinds:
                per = [run[kind] for run in phases[side] if kind in run]
                launch, prepare, run_s = (
                    statistics.median(p[x] for p in per) for x in ("launch", "prepare", "run")
                )
                cells.append(f"{kind} {launch:.2f}/{prepare:.2f}/{run_s:.2f}")
            print(f"  {side:20s} " + "; ".join(cells))
        fan = medians["fan_out_forkserver"]

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
                    case="4-step fan-out, forkserver + preload, vs the IO-manager path",
                    refiner_s=fan,
                    baseline="IO-manager path, launch_local 4 workers",
                    baseline_s=one,
                    target="<= 1.5x",
                    met=fan / one <= 1.5,
                    repeats=args.repeat,
                    extra={"fixed_cost_s": round(fan - one, 3), "preload": preload},
                ),
                *(
                    Result(
                        workload="dagster",
                        case=SIDES[side][0],
                        refiner_s=medians[side],
                        baseline="IO-manager path, launch_local 4 workers",
                        baseline_s=one,
                        target="reported",
                        met=None,
                        repeats=args.repeat,
                    )
                    for side in ("fan_out_spawn", "fan_out_small", "floor_fanout", "floor_chain")
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

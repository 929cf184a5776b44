"""A dataset asset whose write fans out over Dagster steps: plan -> write x N -> finalize.

:func:`build_dataset_asset` turns ``fn(context) -> mdr.Pipeline`` into one
graph-backed asset. Its write steps are mapped over dynamic outputs, so whatever
executor the job runs on (in-process, multiprocess, dask, celery, Kubernetes)
spreads them over processes or machines; each shows in the run timeline.

The dataset lands exactly where, and as, the asset's refiner IO manager would
write it (:class:`~refiner_dagster.RefinerBlobIOManager` /
:class:`~refiner_dagster.RefinerFileIOManager`)::

    <base_url>/<asset/key>/[<partition>/]v-<run id>/   table files, assets/, _refiner/
    <base_url>/<asset/key>/[<partition>/]_current.json published pointer

so downstream assets load it through that IO manager like any other dataset
asset. The finalize step is write -> audit -> publish in one step (no finalization
asset needed): it reduces the version, runs the ``missing_assets`` and
``reference_integrity`` checks declared on the asset, and moves the published pointer
only when no ERROR-severity check failed.

Retries and resume: each write step's attempt id derives from the Dagster run id,
the step key and the retry number; a retried step writes a new attempt and the
finalize step removes the dead one's files. Re-executing a failed run from failure
keeps the shards already committed and finishes the same version (the finalize step
writes the shards of write steps the failed run never started). Once a version is
published the finalize step removes the run's plan and write step outputs
(:mod:`refiner_dagster.step_outputs`); a failed run keeps them.

Concurrent runs: two runs of one partition may write at once, but the first to finish
publishes and the other fails with :class:`~refiner_dagster.SupersededError` naming it
(:mod:`refiner_dagster.one_publisher`).
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from .checks import AUDITS_KEY, DEFAULT_SAMPLE_SIZE, DEFAULT_SAMPLE_THRESHOLD
from .fanout_finalize import finalize_step
from .fanout_range import PUBLISHED_TYPE, finalize_range
from .fanout_steps import (
    DATASET_OUTPUT,
    DEFAULT_MAX_TASKS,
    FanoutConfig,
    FanoutPlan,
    FanoutSpec,
    FanoutTask,
    PipelineFn,
    attempt_id_for,
    plan_step,
    write_step,
)
from .finalization import audit_check_specs
from .lerobot_format import declares_lerobot
from .publish import AuditPolicy
from .settings import DATASET_KEY, validate_asset_metadata
from .step_outputs import remove_step_outputs

_KIND_TAGS = {"kind": "refiner"}


def build_dataset_asset(
    fn: PipelineFn,
    *,
    name: str | None = None,
    key_prefix: str | list[str] | None = None,
    io_manager_key: str = "refiner",
    step_io_manager_key: str = "io_manager",
    partitions_def: dg.PartitionsDefinition | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    group_name: str | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    max_tasks: int | None = None,
    pool: str | None = None,
    op_tags: Mapping[str, Any] | None = None,
    retry_policy: dg.RetryPolicy | None = None,
    static_tasks: int | None = None,
    checks: bool = True,
    max_missing_fraction: float | None = None,
    sample_threshold: int = DEFAULT_SAMPLE_THRESHOLD,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    min_shards_per_task: int = 1,
    mode: str = "overwrite",
) -> dg.AssetsDefinition:
    """One dataset asset written by ``plan -> write x N -> finalize`` steps.

    ``fn(context)`` returns the lazy ``mdr.Pipeline`` to write; it is called again in
    every step (with that step's ``OpExecutionContext``: ``partition_key``,
    ``resources``, ``log``), so the pipeline is rebuilt where the step runs and may
    hold lambdas, closures and local functions. It must give the same shards each time.

    - ``io_manager_key``: the refiner IO manager whose settings, storage and
      ``definition_metadata`` keys (``refiner/format``, ``refiner/target_bytes`` ...)
      the steps write with; it also loads the asset downstream. ``refiner/*`` keys of
      ``metadata`` are checked here, when the definitions load (``ValueError`` naming
      the asset, the key, the bad value and the valid ones).
    - ``step_io_manager_key``: the persistent IO manager carrying the plan, the shard
      lists and the manifests between steps (``fs_io_manager`` by default; bind it to
      ``dagster_aws.s3.S3PickleIOManager`` when steps run on other machines).
    - ``max_tasks``: at most this many write steps (default ``min(shards, 64)``); run
      config ``ops: {<name>: {ops: {<name>_plan: {config: {max_tasks: N}}}}}`` overrides.
    - ``min_shards_per_task``: every write step gets at least this many shards (default
      1), so a plan of few shards runs in fewer write steps: ``shards //
      min_shards_per_task`` of them, at least one, at most ``max_tasks``. Each step is a
      process to start on the multiprocess executor (README: executor settings); set it
      to the shards one process writes in a few seconds. Run config ``min_shards_per_task`` overrides.
      With ``static_tasks`` the steps left without shards still start and finish at once.
    - ``pool`` / ``op_tags`` / ``retry_policy``: set on the write steps only, so a
      deployment can throttle them (Dagster pools), size them (``dagster-k8s/config``)
      and retry them.
    - ``static_tasks``: exactly this many write steps, known before the run starts,
      instead of steps mapped over dynamic outputs. For executors that only run the
      steps of the initial plan: ``dagster_dask.dask_executor`` (0.29) skips mapped
      steps, so without it the plan step fails the run there. Steps left without shards
      finish at once. Time-window partitions on dask need
      :data:`refiner_dagster.dask_executor.dask_executor`.
    - ``backfill_policy``: ``dg.BackfillPolicy.single_run()`` (or ``multi_run(N)``) lets
      one run write a range of partitions: the plan step plans every partition of the
      range, the write steps share their shards, and the finalize step publishes each
      partition's version on its own (one failing its audit blocks only itself; the run
      then fails naming it). Each published partition gets its own materialization.
    - ``mode``: ``"overwrite"`` (default) writes every version whole; ``"append"`` adds
      the run's rows to the published version, sharing its files (the same as
      ``refiner/mode: append`` in ``metadata``; see :mod:`refiner_dagster.append`).
    - ``checks`` (default on), ``max_missing_fraction``, ``sample_threshold``,
      ``sample_size``, ``seed``: the audit before publishing, as in
      :func:`~refiner_dagster.build_finalization_asset`; the two checks (three with
      ``refiner/format: lerobot``: ``video_integrity`` too) are the asset's own ``check_specs``.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import RefinerBlobIOManager, build_dataset_asset
        >>> def frames(context) -> mdr.Pipeline:
        ...     return mdr.from_items([{"i": i} for i in range(8)], items_per_shard=2)
        >>> asset = build_dataset_asset(frames, max_tasks=4, retry_policy=dg.RetryPolicy(max_retries=2))
        >>> asset.key.to_user_string(), sorted(asset.node_def.node_dict)
        ('frames', ['frames_finalize', 'frames_plan', 'frames_write'])
        >>> defs = dg.Definitions(assets=[asset], resources={"refiner": RefinerBlobIOManager()})
    """
    if not callable(fn):
        raise TypeError(f"build_dataset_asset takes a function context -> mdr.Pipeline, got {fn!r}")
    _check_task_counts(max_tasks, static_tasks, min_shards_per_task)
    key = _asset_key(fn, name, key_prefix)
    asset_name = key.path[-1]
    if mode != "overwrite":
        metadata = {**dict(metadata or {}), "refiner/mode": mode}
    # a bad refiner/format (or other refiner/ setting) fails when the definitions load
    validate_asset_metadata(metadata, where=f"asset {key.to_user_string()}")
    policy = AuditPolicy(
        max_missing_fraction=max_missing_fraction,
        sample_threshold=sample_threshold,
        sample_size=sample_size,
        seed=seed,
    )
    lerobot = declares_lerobot(metadata)
    check_specs = audit_check_specs(key, policy, lerobot=lerobot) if checks else []
    spec = FanoutSpec(
        fn,
        key,
        io_manager_key,
        dict(metadata or {}),
        max_tasks or static_tasks,
        static_tasks,
        policy if checks else None,
        partitions_def,
        min_shards_per_task=min_shards_per_task,
    )
    resources = {io_manager_key}

    write_tags = {**_KIND_TAGS, **dict(op_tags or {})}
    step_io = step_io_manager_key

    # Dagster routes a graph asset's check results through outputs named
    # <asset key as identifier>_<check name>.
    check_outputs = [f"{key.to_python_identifier()}_{c.name}" for c in check_specs]

    @dg.op(
        name=f"{asset_name}_finalize",
        out={
            DATASET_OUTPUT: dg.Out(PUBLISHED_TYPE, io_manager_key=io_manager_key),
            **{name: dg.Out(is_required=False) for name in check_outputs},
        },
        required_resource_keys={*resources, step_io},
        tags=_KIND_TAGS,
    )
    def _finalize(context: dg.OpExecutionContext, plan: FanoutPlan, written: list):
        if len(plan.versions) > 1:
            yield from finalize_range(spec, context, plan)
        else:
            yield from finalize_step(spec, context, plan, written)
        # published: the plan and manifest lists are no longer needed (a failed run,
        # which raised above, keeps them for re-execution from failure)
        remove_step_outputs(context, step_io, asset_name)

    def finalized(plan: Any, written: Any) -> dict[str, Any]:
        outputs = _finalize(plan, written)
        if not check_outputs:
            return {asset_name: outputs}
        dataset, *results = outputs
        return {asset_name: dataset, **dict(zip(check_outputs, results, strict=True))}

    # dynamic outputs, or for executors that only run the initial plan's steps, one list
    tasks_out = (
        dg.DynamicOut(FanoutTask, io_manager_key=step_io)
        if static_tasks is None
        else dg.Out(list, io_manager_key=step_io)
    )

    @dg.op(
        name=f"{asset_name}_plan",
        out={"plan": dg.Out(FanoutPlan, io_manager_key=step_io), "tasks": tasks_out},
        required_resource_keys=resources,
        tags=_KIND_TAGS,
    )
    def _plan(context: dg.OpExecutionContext, config: FanoutConfig):
        yield from plan_step(spec, context, config)

    if static_tasks is None:

        @dg.op(
            name=f"{asset_name}_write",
            out=dg.Out(list, io_manager_key=step_io),
            required_resource_keys=resources,
            retry_policy=retry_policy,
            pool=pool,
            tags=write_tags,
        )
        def _write(context: dg.OpExecutionContext, task: FanoutTask) -> dg.Output:
            return write_step(spec, context, task)

        def compose():
            plan, tasks = _plan()
            return finalized(plan, tasks.map(_write).collect())

    else:

        def write_op(index: int) -> dg.OpDefinition:
            @dg.op(
                name=f"{asset_name}_write_{index:05d}",
                out=dg.Out(list, io_manager_key=step_io),
                required_resource_keys=resources,
                retry_policy=retry_policy,
                pool=pool,
                tags=write_tags,
            )
            def _write_one(context: dg.OpExecutionContext, tasks: list) -> dg.Output:
                if index >= len(tasks):
                    return dg.Output([], metadata={"shards_written": 0})
                return write_step(spec, context, tasks[index])

            return _write_one

        writes = [write_op(i) for i in range(static_tasks)]

        def compose():
            plan, tasks = _plan()
            return finalized(plan, [write(tasks) for write in writes])

    out = dg.AssetOut(
        key=key,
        io_manager_key=io_manager_key,
        description=description
        or f"Refiner dataset {key.to_user_string()}, written by fan-out steps.",
        metadata={
            **dict(metadata or {}),
            DATASET_KEY: key.to_user_string(),
            **({AUDITS_KEY: True} if checks else {}),
        },
        kinds={"refiner"},
    )

    # on a graph asset, Dagster takes the group from here, not from the AssetOut
    @dg.graph_multi_asset(
        name=asset_name,
        outs={asset_name: out},
        group_name=group_name,
        partitions_def=partitions_def,
        backfill_policy=backfill_policy,
        check_specs=check_specs or None,
    )
    def _asset():
        return compose()

    return _asset


__all__ = [
    "DEFAULT_MAX_TASKS",
    "FanoutConfig",
    "FanoutPlan",
    "FanoutTask",
    "attempt_id_for",
    "build_dataset_asset",
]


def _check_task_counts(
    max_tasks: int | None, static_tasks: int | None, min_shards_per_task: int
) -> None:
    checked = (
        ("max_tasks", max_tasks),
        ("static_tasks", static_tasks),
        ("min_shards_per_task", min_shards_per_task),
    )
    for label, value in checked:
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if static_tasks is not None and max_tasks is not None and max_tasks > static_tasks:
        raise ValueError(f"max_tasks={max_tasks} cannot exceed static_tasks={static_tasks}")


def _asset_key(fn: PipelineFn, name: str | None, key_prefix: str | list[str] | None) -> dg.AssetKey:
    asset_name = name or getattr(fn, "__name__", None)
    if not asset_name or not asset_name.isidentifier():
        raise ValueError(
            f"build_dataset_asset needs name= (a Python identifier) for {fn!r}; got {asset_name!r}"
        )
    if key_prefix is None:
        prefix: list[str] = []
    else:
        prefix = [key_prefix] if isinstance(key_prefix, str) else list(key_prefix)
    return dg.AssetKey([*prefix, asset_name])

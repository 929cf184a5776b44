"""The three steps of a fan-out dataset asset: plan, write (mapped), finalize.

Each step calls the user's function again to rebuild the lazy pipeline where it
runs, so nothing but small values travels between steps: a :class:`FanoutPlan`
(where the version lives, the engine run id), one :class:`FanoutTask` per write
step (its shards) and the attempt manifests each write step committed. They go
through the steps' IO manager (``fs_io_manager`` locally, ``S3PickleIOManager`` on
a cluster), so a re-executed run loads them from the run it resumes.

Every step writes through the :class:`~refiner_dagster.writer.DatasetWriter` of the
dataset's refiner IO manager (a resource of every step): its settings, asset config
and version folder, exactly as when the IO manager writes the asset in one step.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import dagster as dg
from pydantic import Field

import refiner_core as mdr
from refiner_core import integration
from refiner_core.manifests import AttemptManifest

from .io_manager import writer_for
from .metadata import counters_metadata
from .partition_view import partition_view
from .publish import AuditPolicy
from .storage import short_run_id
from .strict_fields import StrictFields
from .writer import DatasetWriter

PipelineFn = Callable[[dg.OpExecutionContext], mdr.Pipeline]
DEFAULT_MAX_TASKS = 64
DATASET_OUTPUT = "dataset"
T = TypeVar("T")


@dataclass(frozen=True)
class PartitionVersion:
    """The version one partition (``None``: the unpartitioned asset) is written into."""

    partition_key: str | None
    version: str
    shards: int


@dataclass(frozen=True)
class FanoutPlan:
    """Where the run's versions live (one per partition it targets), which engine run
    writes them, and in how many write steps."""

    asset_path: tuple[str, ...]
    versions: tuple[PartitionVersion, ...]
    run_id: str
    tasks: int
    started_at: float

    @property
    def shards(self) -> int:
        return sum(v.shards for v in self.versions)

    def partition(self, partition_key: str | None) -> PartitionVersion:
        return next(v for v in self.versions if v.partition_key == partition_key)


@dataclass(frozen=True)
class FanoutTask:
    """One write step's work: some shards of the plan, of one or more partitions
    (``partition_keys[i]`` is the partition of ``shards[i]``)."""

    plan: FanoutPlan
    index: int
    shards: list[mdr.Shard] = field(default_factory=list)
    partition_keys: list[str | None] = field(default_factory=list)

    @property
    def shard_ids(self) -> list[str]:
        return [s.id for s in self.shards]

    def by_partition(self) -> list[tuple[PartitionVersion, list[mdr.Shard]]]:
        """The task's shards grouped by the partition version they belong to, in order."""
        groups: dict[str | None, list[mdr.Shard]] = {}
        for key, shard in zip(self.partition_keys, self.shards, strict=True):
            groups.setdefault(key, []).append(shard)
        return [(self.plan.partition(key), shards) for key, shards in groups.items()]


class FanoutConfig(StrictFields, dg.Config):
    """Run config of a fan-out dataset's plan step.

    >>> FanoutConfig(max_tasks=8).max_tasks
    8
    """

    max_tasks: int | None = Field(
        default=None,
        gt=0,
        description=(
            "At most this many write steps (shards are grouped evenly). Default: the asset's "
            "max_tasks, else min(shards, 64)."
        ),
    )
    min_shards_per_task: int | None = Field(
        default=None,
        gt=0,
        description=(
            "Each write step gets at least this many shards, so a small plan runs in fewer "
            "steps (fewer step processes to start). Default: the asset's min_shards_per_task."
        ),
    )


def attempt_id_for(dagster_run_id: str, step_key: str, retry_number: int) -> str:
    """The attempt id of one try of one write step: 12 hex digits of run, step and retry.

    A retry gets a new attempt (so finalization can tell the dead one's files apart);
    the same try always gets the same id.

    >>> a = attempt_id_for("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab", "d_write[task_00000]", 0)
    >>> len(a), a == attempt_id_for("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab",
    ...                             "d_write[task_00000]", 1)
    (12, False)
    """
    text = f"{dagster_run_id}\n{step_key}\n{int(retry_number)}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class FanoutSpec:
    """What every step of one fan-out dataset asset needs to know."""

    fn: PipelineFn
    asset_key: dg.AssetKey
    io_manager_key: str
    definition_metadata: Mapping[str, Any]
    max_tasks: int | None
    static_tasks: int | None = None
    audit: AuditPolicy | None = None
    partitions_def: dg.PartitionsDefinition | None = None
    min_shards_per_task: int = 1

    @property
    def where(self) -> str:
        return f"asset {self.asset_key.to_user_string()}"

    def writer(self, context: dg.OpExecutionContext) -> DatasetWriter:
        return writer_for(context, self.io_manager_key, self.where)

    def pipeline(
        self, context: dg.OpExecutionContext, partition_key: str | None = None
    ) -> mdr.Pipeline:
        """``fn``'s pipeline for ``partition_key`` (one of the partitions the step targets)."""
        obj = self.fn(partition_view(context, partition_key, self.partitions_def))
        if isinstance(obj, mdr.Pipeline):
            return obj
        kind = (
            "a PipelineSequence (a writer is attached)"
            if isinstance(obj, mdr.PipelineSequence)
            else type(obj).__name__
        )
        raise TypeError(
            f"{self.where}: the function given to build_dataset_asset returned {kind}; it must "
            "return the lazy mdr.Pipeline itself (e.g. mdr.read_parquet(...).map(...)), the "
            "asset's steps write it"
        )


def group_shards(shards: list[T], max_tasks: int, min_shards_per_task: int = 1) -> list[list[T]]:
    """At most ``max_tasks`` contiguous groups, as even as they can be, each of at least
    ``min_shards_per_task`` shards when there are that many (so a small plan makes few
    groups: ``len(shards) // min_shards_per_task``, and at least one).

    >>> [len(g) for g in group_shards(list(range(10)), max_tasks=4)]
    [3, 3, 2, 2]
    >>> [len(g) for g in group_shards(list(range(10)), max_tasks=4, min_shards_per_task=4)]
    [5, 5]
    """
    if max_tasks <= 0:
        raise ValueError(f"max_tasks must be a positive integer, got {max_tasks}")
    if min_shards_per_task <= 0:
        raise ValueError(
            f"min_shards_per_task must be a positive integer, got {min_shards_per_task}"
        )
    if not shards:
        return []
    count = max(1, min(max_tasks, len(shards) // min_shards_per_task))
    size, extra = divmod(len(shards), count)
    groups, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        groups.append(shards[start:end])
        start = end
    return groups


def target_partitions(context: dg.OpExecutionContext) -> list[str | None]:
    """The partitions the step's run targets: one, a range (a single-run backfill), or
    ``[None]`` for an unpartitioned asset."""
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    return [None]


def plan_tasks(
    spec: FanoutSpec, context: dg.OpExecutionContext, config: FanoutConfig
) -> tuple[FanoutPlan, list[FanoutTask]]:
    """Open each targeted partition's version folder, plan its write stage's shards, and
    group the shards of all of them into tasks."""
    started = time.time()
    run_id = short_run_id(context.run_id)
    writer = spec.writer(context)
    versions: list[PartitionVersion] = []
    planned: list[tuple[str | None, mdr.Shard]] = []
    for key in target_partitions(context):
        pipeline = spec.pipeline(context, key)
        version, _, assets = writer.begin(
            spec.asset_key, key, context.run_id, spec.definition_metadata
        )
        shards = version.writer(pipeline, assets).write_stage.plan(run_id=run_id)
        versions.append(PartitionVersion(key, version.name, len(shards)))
        planned.extend((key, shard) for shard in shards)
        context.log.info(f"{version.describe()}: {len(shards)} shard(s)")
    max_tasks = config.max_tasks or spec.max_tasks or min(len(planned), DEFAULT_MAX_TASKS) or 1
    if spec.static_tasks is not None and max_tasks > spec.static_tasks:
        raise ValueError(
            f"{spec.where} has {spec.static_tasks} write steps (static_tasks); run config "
            f"max_tasks={max_tasks} cannot exceed it"
        )
    per_task = config.min_shards_per_task or spec.min_shards_per_task
    groups = group_shards(planned, max_tasks=max_tasks, min_shards_per_task=per_task)
    plan = FanoutPlan(tuple(spec.asset_key.path), tuple(versions), run_id, len(groups), started)
    context.log.info(
        f"{spec.where}: {len(planned)} shard(s) of {len(versions)} version(s) in "
        f"{len(groups)} write step(s), engine run {run_id}"
    )
    tasks = [
        FanoutTask(plan, i, [shard for _, shard in group], [key for key, _ in group])
        for i, group in enumerate(groups)
    ]
    return plan, tasks


# Executors that run only the steps planned before the run starts: steps mapped over
# dynamic outputs (and the finalize step after them) never run, yet the run succeeds.
INITIAL_PLAN_ONLY_EXECUTORS = frozenset({"dask"})


def refuse_skipping_executor(spec: FanoutSpec, context: dg.OpExecutionContext) -> None:
    """Fail the plan step when the run's executor would skip the mapped write steps."""
    if spec.static_tasks is not None:
        return
    try:
        executor = context.job_def.executor_def.name
    except dg.DagsterError:  # the op is invoked directly (build_op_context): no job
        return
    if executor in INITIAL_PLAN_ONLY_EXECUTORS:
        raise dg.Failure(
            description=(
                f"{spec.where} maps its write steps over dynamic outputs, but the {executor!r} "
                "executor runs only the steps planned before the run starts: the write and "
                "finalize steps would be skipped and nothing written. Build the asset with "
                "build_dataset_asset(..., static_tasks=N) to run it on this executor"
            )
        )


def plan_step(spec: FanoutSpec, context: dg.OpExecutionContext, config: FanoutConfig):
    """The plan, then the tasks: one dynamic output each (write steps mapped over them),
    or with ``static_tasks`` one list (write step ``i`` takes task ``i``)."""
    refuse_skipping_executor(spec, context)
    plan, tasks = plan_tasks(spec, context, config)
    yield dg.Output(plan, output_name="plan", metadata={"shards": plan.shards, "tasks": plan.tasks})
    if spec.static_tasks is not None:
        yield dg.Output(tasks, output_name="tasks")
        return
    for task in tasks:
        yield dg.DynamicOutput(task, output_name="tasks", mapping_key=f"task_{task.index:05d}")


def write_step(spec: FanoutSpec, context: dg.OpExecutionContext, task: FanoutTask) -> dg.Output:
    """Write the task's shards not committed yet, as this try's attempt (one attempt id
    for every partition version the task writes into)."""
    plan = task.plan
    writer = spec.writer(context)
    _, assets = writer.settings(spec.asset_key, spec.definition_metadata)
    mapping_key = context.get_mapping_key()
    step_key = f"{context.op_handle}[{mapping_key}]" if mapping_key else str(context.op_handle)
    attempt = attempt_id_for(context.run_id, step_key, context.retry_number)
    result: list[AttemptManifest] = []
    written: list[AttemptManifest] = []
    kept_count = 0
    for part, shards in task.by_partition():
        version = writer.reopen(plan.asset_path, part.partition_key, part.version)
        new, kept = writer.write_shards(
            version,
            spec.pipeline(context, part.partition_key),
            assets,
            shards,
            run_id=plan.run_id,
            attempt_id=attempt,
        )
        result.extend(sorted([*kept, *new], key=lambda m: m.shard_id))
        written.extend(new)
        kept_count += len(kept)
    totals = integration.committed_counters(written)
    context.log.info(
        f"task {task.index}: wrote {len(written)} shard(s) as attempt {attempt}, "
        f"{kept_count} already committed, {totals.get('rows_written', 0)} rows"
    )
    metadata = counters_metadata(
        totals, keys=("rows_read", "rows_written", "files_written", "assets_written")
    )
    metadata["shards_written"] = dg.MetadataValue.int(len(written))
    metadata["shards_already_committed"] = dg.MetadataValue.int(kept_count)
    metadata["attempt_id"] = dg.MetadataValue.text(attempt)
    return dg.Output(result, metadata=metadata)

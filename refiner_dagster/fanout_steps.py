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
from typing import Any

import dagster as dg
from pydantic import Field

import refiner_core as mdr
from refiner_core import integration, manifests
from refiner_core.manifests import AttemptManifest

from .finalization import published_metadata
from .io_manager import writer_for
from .metadata import counters_metadata
from .publish import AuditFailedError, AuditPolicy
from .storage import short_run_id
from .strict_fields import StrictFields
from .writer import DatasetWriter, committed_counters

PipelineFn = Callable[[dg.OpExecutionContext], mdr.Pipeline]
DEFAULT_MAX_TASKS = 64
DATASET_OUTPUT = "dataset"


@dataclass(frozen=True)
class FanoutPlan:
    """Where the run's version lives and which engine run writes it."""

    asset_path: tuple[str, ...]
    partition_key: str | None
    version: str
    run_id: str
    shards: int
    tasks: int
    started_at: float


@dataclass(frozen=True)
class FanoutTask:
    """One write step's work: some shards of the plan's write stage."""

    plan: FanoutPlan
    index: int
    shards: list[mdr.Shard] = field(default_factory=list)

    @property
    def shard_ids(self) -> list[str]:
        return [s.id for s in self.shards]


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
    min_shards_per_task: int = 1

    @property
    def where(self) -> str:
        return f"asset {self.asset_key.to_user_string()}"

    def writer(self, context: dg.OpExecutionContext) -> DatasetWriter:
        return writer_for(context, self.io_manager_key, self.where)

    def pipeline(self, context: dg.OpExecutionContext) -> mdr.Pipeline:
        obj = self.fn(context)
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


def group_shards(
    shards: list[mdr.Shard], max_tasks: int, min_shards_per_task: int = 1
) -> list[list[mdr.Shard]]:
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


def plan_tasks(
    spec: FanoutSpec, context: dg.OpExecutionContext, config: FanoutConfig
) -> tuple[FanoutPlan, list[FanoutTask]]:
    """Open the version folder, plan the write stage's shards, group them into tasks."""
    pipeline = spec.pipeline(context)
    partition = context.partition_key if context.has_partition_key else None
    started = time.time()
    version, _, assets = spec.writer(context).begin(
        spec.asset_key, partition, context.run_id, spec.definition_metadata
    )
    run_id = short_run_id(context.run_id)
    shards = version.writer(pipeline, assets).write_stage.plan(run_id=run_id)
    max_tasks = config.max_tasks or spec.max_tasks or min(len(shards), DEFAULT_MAX_TASKS) or 1
    if spec.static_tasks is not None and max_tasks > spec.static_tasks:
        raise ValueError(
            f"{spec.where} has {spec.static_tasks} write steps (static_tasks); run config "
            f"max_tasks={max_tasks} cannot exceed it"
        )
    per_task = config.min_shards_per_task or spec.min_shards_per_task
    groups = group_shards(shards, max_tasks=max_tasks, min_shards_per_task=per_task)
    plan = FanoutPlan(
        tuple(spec.asset_key.path),
        partition,
        version.name,
        run_id,
        len(shards),
        len(groups),
        started,
    )
    context.log.info(
        f"{version.describe()}: {len(shards)} shard(s) in {len(groups)} write step(s), "
        f"engine run {run_id}"
    )
    return plan, [FanoutTask(plan, i, list(group)) for i, group in enumerate(groups)]


def plan_step(spec: FanoutSpec, context: dg.OpExecutionContext, config: FanoutConfig):
    """The plan, then the tasks: one dynamic output each (write steps mapped over them),
    or with ``static_tasks`` one list (write step ``i`` takes task ``i``)."""
    plan, tasks = plan_tasks(spec, context, config)
    yield dg.Output(plan, output_name="plan", metadata={"shards": plan.shards, "tasks": plan.tasks})
    if spec.static_tasks is not None:
        yield dg.Output(tasks, output_name="tasks")
        return
    for task in tasks:
        yield dg.DynamicOutput(task, output_name="tasks", mapping_key=f"task_{task.index:05d}")


def write_step(spec: FanoutSpec, context: dg.OpExecutionContext, task: FanoutTask) -> dg.Output:
    """Write the task's shards not committed yet, as this try's attempt."""
    plan = task.plan
    writer = spec.writer(context)
    version = writer.reopen(plan.asset_path, plan.partition_key, plan.version)
    _, assets = writer.settings(spec.asset_key, spec.definition_metadata)
    mapping_key = context.get_mapping_key()
    step_key = f"{context.op_handle}[{mapping_key}]" if mapping_key else str(context.op_handle)
    attempt = attempt_id_for(context.run_id, step_key, context.retry_number)
    written, kept = writer.write_shards(
        version,
        spec.pipeline(context),
        assets,
        task.shards,
        run_id=plan.run_id,
        attempt_id=attempt,
    )
    result = sorted([*kept, *written], key=lambda m: m.shard_id)
    totals = integration.committed_counters(written)
    context.log.info(
        f"task {task.index}: wrote {len(written)} shard(s) as attempt {attempt}, "
        f"{len(kept)} already committed, {totals.get('rows_written', 0)} rows"
    )
    metadata = counters_metadata(
        totals, keys=("rows_read", "rows_written", "files_written", "assets_written")
    )
    metadata["shards_written"] = dg.MetadataValue.int(len(written))
    metadata["shards_already_committed"] = dg.MetadataValue.int(len(kept))
    metadata["attempt_id"] = dg.MetadataValue.text(attempt)
    return dg.Output(result, metadata=metadata)


def finalize_step(
    spec: FanoutSpec,
    context: dg.OpExecutionContext,
    plan: FanoutPlan,
    written: list[list[AttemptManifest]],
):
    """Record the version written, then reduce, audit and publish it.

    Yields the audit's check results first; when an ERROR-severity check fails the
    step fails without publishing, and readers keep the version they had.
    """
    writer = spec.writer(context)
    version = writer.reopen(plan.asset_path, plan.partition_key, plan.version)
    # read once: counting, reducing and the summary share these manifests
    persisted = manifests.read_persisted(version.output_folder())
    counters = committed_counters(version, plan.run_id, persisted)
    committed = counters["shards"]
    if committed != plan.shards:
        raise RuntimeError(
            f"{version.describe()}: {committed} of {plan.shards} shard(s) committed "
            f"(write steps reported {sum(len(w) for w in written)}); re-execute the run from "
            "failure to write the missing ones"
        )
    started = time.monotonic() - (time.time() - plan.started_at)
    writer.record_written(version, plan.run_id, spec.pipeline(context), started, counters)
    try:
        finalized = writer.finalize(version, audit=spec.audit, persisted=persisted)
    except AuditFailedError as error:
        yield from error.results
        raise dg.Failure(
            description=str(error), metadata={"failed_checks": error.failed}
        ) from error
    yield from finalized.checks
    summary = finalized.summary
    metadata = published_metadata(version, summary)
    metadata["shards"] = dg.MetadataValue.int(summary.shards)
    metadata["refiner/state"] = dg.MetadataValue.text("published")
    metadata["refiner/write_steps"] = dg.MetadataValue.int(plan.tasks)
    context.log.info(f"published {version.describe()}: {summary.rows_written} rows")
    published = writer.storage.current(version.asset_path, version.partition_key)
    yield dg.Output(published, output_name=DATASET_OUTPUT, metadata=metadata)

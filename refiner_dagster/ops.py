"""The engine's stages as Dagster ops, and a graph that fans the write out.

``plan`` lists the write stage's shards and groups them into worker tasks, one
``DynamicOutput`` each; ``write`` runs one task (its shards, one attempt each) in
its own step; ``finalize`` is the reducer over the persisted manifests. Because
the write op is mapped over dynamic outputs, any executor (multiprocess here; k8s,
celery or dask on a cluster) spreads the tasks over processes or machines. Only
shard lists, run ids and manifests travel between steps, never rows or media.

Every step rebuilds the pipeline by calling ``build_sequence``, an importable
zero-argument function returning the ``PipelineSequence`` (``pipeline.write_*``).
The engine run id is the Dagster run id shortened to 12 hex digits, chosen once
by ``plan`` and passed to the other steps, so re-executing a failed run finishes
the same engine run.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from pydantic import Field

import refiner_core as mdr
from refiner_core.integration import committed_counters
from refiner_core.manifests import AttemptManifest, DatasetSummary

from .metadata import counters_metadata, summary_metadata
from .storage import short_run_id
from .strict_fields import StrictFields

SequenceBuilder = Callable[[], mdr.PipelineSequence]


@dataclass(frozen=True)
class WriteTask:
    """One write step's work: shards of the write stage and the engine run id."""

    run_id: str
    index: int
    shards: list[mdr.Shard] = field(default_factory=list)

    @property
    def shard_ids(self) -> list[str]:
        return [s.id for s in self.shards]


class PlanConfig(StrictFields, dg.Config):
    """How ``plan`` groups shards into write steps."""

    max_tasks: int = Field(
        default=64, description="At most this many write steps (shards are grouped evenly)."
    )
    shards_per_task: int | None = Field(
        default=None,
        description="Shards per write step; overrides max_tasks when set.",
    )


def resolve_builder(build_sequence: SequenceBuilder | str) -> SequenceBuilder:
    """A builder function, given itself or as ``"package.module:function"``."""
    if callable(build_sequence):
        return build_sequence
    module_name, _, attr = str(build_sequence).partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"build_sequence {build_sequence!r} must be a callable or 'package.module:function'"
        )
    return getattr(importlib.import_module(module_name), attr)


def _build(build_sequence: SequenceBuilder | str) -> mdr.PipelineSequence:
    sequence = resolve_builder(build_sequence)()
    if not isinstance(sequence, mdr.PipelineSequence) or not sequence.stages:
        raise TypeError(
            "build_sequence must return a PipelineSequence from pipeline.write_parquet/"
            f"write_jsonl/write_lance, got {type(sequence).__name__}"
        )
    try:
        sequence.write_stage  # noqa: B018  (raises when the sequence does not start with a write)
    except ValueError as exc:
        raise TypeError(
            f"build_sequence returned a sequence that is not a writer's: {exc}"
        ) from exc
    return sequence


def group_shards(shards: list[Any], *, max_tasks: int, shards_per_task: int | None) -> list[list]:
    """Contiguous groups: ``shards_per_task`` each, or at most ``max_tasks`` even groups.

    >>> [len(g) for g in group_shards(list(range(10)), max_tasks=4, shards_per_task=None)]
    [3, 3, 2, 2]
    """
    if not shards:
        return []
    if shards_per_task is not None:
        if shards_per_task <= 0:
            raise ValueError(f"shards_per_task must be positive, got {shards_per_task}")
        return [shards[i : i + shards_per_task] for i in range(0, len(shards), shards_per_task)]
    if max_tasks <= 0:
        raise ValueError(f"max_tasks must be positive, got {max_tasks}")
    n = min(max_tasks, len(shards))
    size, extra = divmod(len(shards), n)
    groups, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        groups.append(shards[start:end])
        start = end
    return groups


def build_plan_op(build_sequence: SequenceBuilder | str, *, name: str = "refiner_plan"):
    """The plan op: shards of the write stage grouped into ``WriteTask`` dynamic outputs."""

    @dg.op(
        name=name,
        out={"tasks": dg.DynamicOut(WriteTask), "run_id": dg.Out(str)},
        tags={"kind": "refiner"},
    )
    def _plan(context: dg.OpExecutionContext, config: PlanConfig):
        run_id = short_run_id(context.run_id)
        stage = _build(build_sequence).write_stage
        shards = stage.plan(run_id=run_id)
        groups = group_shards(
            shards, max_tasks=config.max_tasks, shards_per_task=config.shards_per_task
        )
        context.log.info(
            f"{stage.name}: {len(shards)} shard(s) in {len(groups)} write task(s), run {run_id}"
        )
        yield dg.Output(
            run_id,
            output_name="run_id",
            metadata={"shards": len(shards), "tasks": len(groups)},
        )
        for i, group in enumerate(groups):
            yield dg.DynamicOutput(
                WriteTask(run_id=run_id, index=i, shards=list(group)),
                output_name="tasks",
                mapping_key=f"task_{i:05d}",
            )

    return _plan


def build_write_op(
    build_sequence: SequenceBuilder | str,
    *,
    name: str = "refiner_write",
    retry_policy: dg.RetryPolicy | None = None,
):
    """The write op: runs one task's shards in this step (one attempt each)."""

    @dg.op(name=name, out=dg.Out(list), retry_policy=retry_policy, tags={"kind": "refiner"})
    def _write(context: dg.OpExecutionContext, task: WriteTask) -> dg.Output:
        stage = _build(build_sequence).write_stage
        manifests = stage.run_task(list(task.shards), run_id=task.run_id)
        totals = committed_counters(manifests)
        context.log.info(
            f"task {task.index}: {len(manifests)} shard(s), {totals.get('rows_written', 0)} rows"
        )
        metadata = counters_metadata(
            totals,
            keys=("rows_read", "rows_written", "files_written", "bytes_written", "assets_written"),
        )
        metadata["shards"] = dg.MetadataValue.text(", ".join(task.shard_ids))
        return dg.Output(manifests, metadata=metadata)

    return _write


def build_finalize_op(build_sequence: SequenceBuilder | str, *, name: str = "refiner_finalize"):
    """The finalize op: the sequence's finalization stages over the persisted manifests."""

    @dg.op(name=name, out=dg.Out(DatasetSummary), tags={"kind": "refiner"})
    def _finalize(
        context: dg.OpExecutionContext, run_id: str, manifests: list[list[AttemptManifest]]
    ) -> dg.Output:
        reported = sum(len(group) for group in manifests)
        summary = _build(build_sequence).finalize(run_id)
        context.log.info(
            f"finalized run {run_id}: {summary.shards} shard(s) committed, "
            f"{reported} manifest(s) reported by write steps"
        )
        return dg.Output(summary, metadata=summary_metadata(summary))

    return _finalize


def refiner_write_graph(
    build_sequence: SequenceBuilder | str,
    *,
    name: str = "refiner_write",
    write_retry_policy: dg.RetryPolicy | None = None,
) -> dg.GraphDefinition:
    """A graph ``plan -> write (mapped over tasks) -> finalize`` for one writer sequence.

    ``build_sequence`` is an importable zero-argument function (or
    ``"package.module:function"``) returning ``pipeline.write_parquet(...)`` (or
    another writer's sequence); every step calls it to rebuild the pipeline. The
    output lands where that writer writes; the finalization summary is the graph's
    output. Ops are named ``<name>_plan``, ``<name>_write`` and ``<name>_finalize``;
    the plan op's config (``max_tasks``, ``shards_per_task``) sets the fan-out.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import refiner_write_graph
        >>> def build():
        ...     return mdr.from_items([{"x": i} for i in range(8)], items_per_shard=2
        ...                           ).write_parquet("/tmp/refiner-example-out")
        >>> job = refiner_write_graph(build, name="example").to_job(
        ...     executor_def=dg.multiprocess_executor)
        >>> sorted(job.graph.node_dict)
        ['example_finalize', 'example_plan', 'example_write']
    """
    plan = build_plan_op(build_sequence, name=f"{name}_plan")
    write = build_write_op(build_sequence, name=f"{name}_write", retry_policy=write_retry_policy)
    finalize = build_finalize_op(build_sequence, name=f"{name}_finalize")

    @dg.graph(name=name, out=dg.GraphOut())
    def _graph():
        tasks, run_id = plan()
        manifests = tasks.map(write)
        return finalize(run_id, manifests.collect())

    return _graph


def build_write_job(
    build_sequence: SequenceBuilder | str,
    *,
    name: str = "refiner_write",
    executor_def: dg.ExecutorDefinition | None = None,
    max_tasks: int | None = None,
    shards_per_task: int | None = None,
    write_retry_policy: dg.RetryPolicy | None = None,
    tags: dict[str, Any] | None = None,
    description: str | None = None,
) -> dg.JobDefinition:
    """A job running :func:`refiner_write_graph`, with default fan-out settings.

    ``executor_def`` defaults to Dagster's multiprocess executor, so each write task
    is its own process; pass ``k8s_job_executor``, ``celery_executor`` etc. to spread
    them over machines. ``max_tasks`` / ``shards_per_task`` become the plan op's
    default config (run config can still change them).

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import build_write_job
        >>> def build():
        ...     return mdr.from_items([{"x": 1}]).write_parquet("/tmp/refiner-example-job")
        >>> build_write_job(build, name="example_job", max_tasks=4).name
        'example_job'
    """
    graph = refiner_write_graph(build_sequence, name=name, write_retry_policy=write_retry_policy)
    plan_config: dict[str, Any] = {}
    if max_tasks is not None:
        plan_config["max_tasks"] = max_tasks
    if shards_per_task is not None:
        plan_config["shards_per_task"] = shards_per_task
    config = {"ops": {f"{name}_plan": {"config": plan_config}}} if plan_config else None
    return graph.to_job(
        name=name,
        executor_def=executor_def or dg.multiprocess_executor,
        config=config,
        tags=tags,
        description=description,
    )

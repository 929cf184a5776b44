"""The finalize step of a fan-out dataset asset: check every planned shard is committed
(writing those a re-execution left out), record the version written, then reduce, audit
and publish it. A run over several partitions finalizes each with
:func:`refiner_dagster.fanout_range.finalize_range`, from the same pieces.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import dagster as dg

from refiner_core import manifests
from refiner_core.manifests import AttemptManifest, PersistedManifests

from .fanout_steps import (
    DATASET_OUTPUT,
    FanoutPlan,
    FanoutSpec,
    PartitionVersion,
    attempt_id_for,
)
from .finalization import published_metadata
from .publish import AuditFailedError
from .storage import DatasetVersion
from .writer import DatasetWriter, Finalized, committed_counters


def write_missing(
    spec: FanoutSpec,
    context: dg.OpExecutionContext,
    plan: FanoutPlan,
    version: DatasetVersion,
    partition_key: str | None,
) -> None:
    """Write, as this step's attempt, every shard of the version no write step committed."""
    writer = spec.writer(context)
    _, assets = writer.settings(spec.asset_key, spec.definition_metadata)
    pipeline = spec.pipeline(context, partition_key)
    shards = version.writer(pipeline, assets).write_stage.plan(run_id=plan.run_id)
    attempt = attempt_id_for(context.run_id, str(context.op_handle), context.retry_number)
    written, _ = writer.write_shards(
        version, pipeline, assets, shards, run_id=plan.run_id, attempt_id=attempt
    )
    context.log.warning(
        f"{version.describe()}: wrote {len(written)} shard(s) of write steps this "
        f"re-execution left out (its parent run stopped before they started), as attempt {attempt}"
    )


def written_version(
    spec: FanoutSpec,
    context: dg.OpExecutionContext,
    writer: DatasetWriter,
    plan: FanoutPlan,
    part: PartitionVersion,
    reported: int | None = None,
    returned: Sequence[AttemptManifest] = (),
) -> tuple[DatasetVersion, PersistedManifests]:
    """``part``'s version with every planned shard committed, recorded as written; raises
    naming the version when write steps left shards missing (``reported``: how many
    shards the write steps said they committed). ``returned`` are the manifests the
    write steps returned for this version: the store is asked only for the others."""
    version = writer.reopen(plan.asset_path, part.partition_key, part.version)
    # read once: counting, reducing and the summary share these manifests
    persisted = manifests.read_persisted(version.output_folder(), known=returned)
    counters = committed_counters(version, plan.run_id, persisted)
    if counters["shards"] != part.shards and context.run.parent_run_id is not None:
        # a re-execution from failure leaves out the write steps its parent never started
        # (its run worker was killed before them): write their shards here
        write_missing(spec, context, plan, version, part.partition_key)
        persisted = manifests.read_persisted(version.output_folder())
        counters = committed_counters(version, plan.run_id, persisted)
    committed = counters["shards"]
    if committed != part.shards:
        said = f" (its {plan.tasks} planned write step(s) reported {reported})"
        said = said if reported is not None else ""
        raise RuntimeError(
            f"{version.describe()}: {committed} of {part.shards} shard(s) committed{said}; "
            "re-execute the run from failure to write the missing ones"
        )
    started = time.monotonic() - (time.time() - plan.started_at)
    pipeline = spec.pipeline(context, part.partition_key)
    writer.record_written(version, plan.run_id, pipeline, started, counters)
    return version, persisted


def version_metadata(version: DatasetVersion, finalized: Finalized, plan: FanoutPlan) -> dict:
    """The materialization metadata of one published version."""
    summary = finalized.summary
    metadata = published_metadata(version, summary)
    metadata["shards"] = dg.MetadataValue.int(summary.shards)
    metadata["refiner/state"] = dg.MetadataValue.text("published")
    metadata["refiner/write_steps"] = dg.MetadataValue.int(plan.tasks)
    return metadata


def finalize_step(
    spec: FanoutSpec,
    context: dg.OpExecutionContext,
    plan: FanoutPlan,
    written: list[list[AttemptManifest]],
):
    """Record the version written, then reduce, audit and publish it.

    Yields the audit's check results first; when an ERROR-severity check fails the
    step fails without publishing, and readers keep the version they had. (A run over
    several partitions is finalized by :func:`refiner_dagster.fanout_range.finalize_range`.)
    """
    writer = spec.writer(context)
    (part,) = plan.versions
    # one version: every manifest the write steps returned is one of its own
    returned = [m for step in written for m in step]
    version, persisted = written_version(spec, context, writer, plan, part, len(returned), returned)
    try:
        finalized = writer.finalize(version, audit=spec.audit, persisted=persisted)
    except AuditFailedError as error:
        yield from error.results
        raise dg.Failure(
            description=str(error), metadata={"failed_checks": error.failed}
        ) from error
    yield from finalized.checks
    context.log.info(f"published {version.describe()}: {finalized.summary.rows_written} rows")
    published = writer.storage.current(version.asset_path, version.partition_key)
    yield dg.Output(
        published, output_name=DATASET_OUTPUT, metadata=version_metadata(version, finalized, plan)
    )

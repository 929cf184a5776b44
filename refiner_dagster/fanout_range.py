"""Finalizing a fan-out run over several partitions (a single-run backfill).

With ``backfill_policy=dg.BackfillPolicy.single_run()`` (or ``multi_run(N)``) one run
writes a version per partition of its range; the finalize step then reduces, audits
and publishes each partition on its own:

- a partition whose audit fails (an ERROR-severity check) is not published, and its
  readers keep the version they had; the other partitions publish;
- each published partition gets its own materialization, with its own metadata
  (``dagster/uri``, ``dagster/partition_row_count``, counters, ``refiner/version``);
- each check is reported once for the run: passed only when it passed on every
  partition, its metadata naming the partitions where it failed;
- when any partition was blocked the step fails, naming the blocked partitions and
  their failed checks, after the published ones were materialized.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg

from .fanout_finalize import version_metadata, written_version
from .fanout_steps import DATASET_OUTPUT, FanoutPlan, FanoutSpec
from .publish import AuditFailedError
from .storage import DatasetVersion

__all__ = ["PUBLISHED_TYPE", "finalize_range", "merge_check_results"]


def _is_published(_context: Any, value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(isinstance(v, DatasetVersion) for v in value.values())
    return isinstance(value, DatasetVersion)


# What a fan-out asset's finalize step outputs: the published version, or over a
# partition range, each partition's published version by partition key.
PUBLISHED_TYPE = dg.DagsterType(
    type_check_fn=_is_published,
    name="PublishedDatasetVersions",
    description="A published DatasetVersion, or a dict partition key -> DatasetVersion",
)


@dataclass(frozen=True)
class _Outcome:
    """One partition's finalization: published (with metadata) or blocked (with its error)."""

    partition_key: str
    version: DatasetVersion
    checks: list[dg.AssetCheckResult]
    metadata: dict[str, Any] | None = None
    blocked: AuditFailedError | None = None


def finalize_range(
    spec: FanoutSpec, context: dg.OpExecutionContext, plan: FanoutPlan
) -> Iterator[Any]:
    """Publish every partition version of ``plan`` that passes its audit; fail the step
    naming the ones that did not (the published ones keep their materializations)."""
    writer = spec.writer(context)
    # every partition fully written before any is published: a missing shard fails the
    # step with nothing published, and re-executing from failure finishes all of them.
    # Manifests are read from each version: the write steps' outputs are not told apart
    # by partition, and shard and attempt names repeat across partitions.
    written = [
        (str(part.partition_key), *written_version(spec, context, writer, plan, part))
        for part in plan.versions
    ]
    outcomes: list[_Outcome] = []
    for key, version, persisted in written:
        try:
            finalized = writer.finalize(version, audit=spec.audit, persisted=persisted)
        except AuditFailedError as error:
            context.log.error(f"partition {key}: {error}")
            outcomes.append(_Outcome(key, version, error.results, blocked=error))
            continue
        context.log.info(f"published {version.describe()}: {finalized.summary.rows_written} rows")
        metadata = version_metadata(version, finalized, plan)
        outcomes.append(_Outcome(key, version, finalized.checks, metadata))
    yield from merge_check_results({o.partition_key: o.checks for o in outcomes})

    published = [o for o in outcomes if o.blocked is None]
    blocked = [o for o in outcomes if o.blocked is not None]
    if blocked:
        for outcome in published:
            yield dg.AssetMaterialization(
                asset_key=spec.asset_key, partition=outcome.partition_key, metadata=outcome.metadata
            )
        raise dg.Failure(
            description=_blocked_message(spec, blocked, published),
            metadata={
                "blocked_partitions": [o.partition_key for o in blocked],
                "published_partitions": [o.partition_key for o in published],
            },
        )
    asset_context = dg.AssetExecutionContext(context)
    for outcome in published:
        asset_context.add_asset_metadata(
            outcome.metadata or {}, asset_key=spec.asset_key, partition_key=outcome.partition_key
        )
    current = {
        o.partition_key: writer.storage.current(o.version.asset_path, o.partition_key)
        for o in published
    }
    yield dg.Output(
        current,
        output_name=DATASET_OUTPUT,
        metadata={"refiner/partitions": dg.MetadataValue.int(len(published))},
    )


def merge_check_results(
    by_partition: dict[str, list[dg.AssetCheckResult]],
) -> list[dg.AssetCheckResult]:
    """One result per check over all partitions: it passed only if it passed on each; the
    worst severity among the failures; metadata ``failed_partitions`` names where.

    >>> ok = dg.AssetCheckResult(check_name="c", passed=True)
    >>> bad = dg.AssetCheckResult(check_name="c", passed=False, description="3 missing")
    >>> (merged,) = merge_check_results({"2024-01-01": [ok], "2024-01-02": [bad]})
    >>> merged.passed, merged.description
    (False, 'failed on 1 of 2 partition(s): 2024-01-02: 3 missing')
    """
    names: dict[str, list[tuple[str, dg.AssetCheckResult]]] = {}
    for key, results in by_partition.items():
        for result in results:
            names.setdefault(str(result.check_name), []).append((key, result))
    merged = []
    for name, checked in names.items():
        failed = [(key, r) for key, r in checked if not r.passed]
        severities = [r.severity for _, r in failed] or [checked[0][1].severity]
        worst = (
            dg.AssetCheckSeverity.ERROR
            if dg.AssetCheckSeverity.ERROR in severities
            else severities[0]
        )
        details = "; ".join(f"{key}: {r.description or 'failed'}" for key, r in failed)
        merged.append(
            dg.AssetCheckResult(
                check_name=name,
                passed=not failed,
                severity=worst,
                description=(
                    f"failed on {len(failed)} of {len(checked)} partition(s): {details}"
                    if failed
                    else f"passed on all {len(checked)} partition(s)"
                ),
                metadata={
                    "partitions_checked": len(checked),
                    "failed_partitions": dg.MetadataValue.json([key for key, _ in failed]),
                },
            )
        )
    return merged


def _blocked_message(spec: FanoutSpec, blocked: list[_Outcome], published: list[_Outcome]) -> str:
    lines = [
        f"partition {o.partition_key}: {', '.join(o.blocked.failed if o.blocked else [])} "
        f"failed, not published ({o.blocked})"
        for o in blocked
    ]
    done = ", ".join(o.partition_key for o in published) or "none"
    return (
        f"{spec.where}: {len(blocked)} of {len(blocked) + len(published)} partition(s) blocked "
        f"by their audit: {', '.join(o.partition_key for o in blocked)}. Published: {done}.\n"
        + "\n".join(lines)
    )

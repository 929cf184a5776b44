"""Write → audit → publish: a written version is reduced, checked, and only then published.

A dataset asset's IO manager *writes* a version;
:meth:`~refiner_dagster.writer.DatasetWriter.finalize` then

1. **reduces** it: the engine's finalization stages keep one attempt per shard, delete
   rejected attempts' files and blocks, commit Lance fragments and write
   ``_refiner/summary.json`` (:func:`reduce_version`);
2. **audits** it when given an :class:`AuditPolicy`: the ``missing_assets`` and
   ``reference_integrity`` checks run on the reduced, unpublished version
   (:func:`audit_version`);
3. **publishes** it only if no ERROR-severity check failed: the ``_current.json``
   pointer is written last, then versions beyond the retention policy are deleted
   (:mod:`.retention`), never one that a live run is still using (:func:`publish_version`).

A failed audit raises :class:`AuditFailedError` naming the checks; readers keep the
version they had.

Example:
    >>> from refiner_dagster.publish import AuditPolicy
    >>> AuditPolicy(max_missing_fraction=0.01).max_missing_fraction
    0.01
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg

import refiner_core as mdr
from refiner_core.integration import finalize_output
from refiner_core.manifests import DatasetSummary, PersistedManifests

from .checks import (
    DEFAULT_SAMPLE_SIZE,
    DEFAULT_SAMPLE_THRESHOLD,
    MISSING_ASSETS_CHECK,
    REFERENCE_INTEGRITY_CHECK,
    integrity_result,
    missing_assets_result,
    scan_references,
)
from .lerobot_format import LEROBOT_FORMAT, lerobot_sink_options, video_integrity_result
from .one_publisher import publishing, refuse_moved_pointer
from .retention import Retention
from .storage import DatasetVersion

__all__ = [
    "AuditFailedError",
    "AuditPolicy",
    "audit_version",
    "error_failures",
    "publish_version",
    "reduce_version",
    "run_liveness",
]

# Whether the Dagster run with this id is still going (True), or finished / unknown (False).
RunLiveness = Callable[[str], bool]


@dataclass(frozen=True)
class AuditPolicy:
    """The checks a version must pass before it is published.

    ``max_missing_fraction``: above this share of missing source assets
    (``missing_assets / (assets_written + missing_assets)``) the ``missing_assets``
    check fails as an ERROR and blocks publication; at or below it (or when ``None``)
    missing assets are a WARN. ``sample_threshold`` / ``sample_size`` / ``seed`` bound
    the ``reference_integrity`` scan.

    >>> AuditPolicy(max_missing_fraction=1.5)
    Traceback (most recent call last):
    ...
    ValueError: max_missing_fraction must be a number between 0 and 1, got 1.5
    """

    max_missing_fraction: float | None = None
    sample_threshold: int = DEFAULT_SAMPLE_THRESHOLD
    sample_size: int = DEFAULT_SAMPLE_SIZE
    seed: int = 0

    def __post_init__(self) -> None:
        fraction = self.max_missing_fraction
        if fraction is not None and (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not 0 <= fraction <= 1
        ):
            raise ValueError(
                f"max_missing_fraction must be a number between 0 and 1, got {fraction!r}"
            )
        for name in ("sample_threshold", "sample_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


class AuditFailedError(mdr.RefinerError, RuntimeError):
    """A version was reduced but not published because ERROR-severity checks failed."""

    def __init__(self, message: str, failed: list[str], results: list[dg.AssetCheckResult]):
        super().__init__(message)
        self.failed = failed
        self.results = results


def asset_config_from_record(record: dict[str, Any]) -> Any:
    """Rebuild the ``assets=`` config a version was written with from its record."""
    assets = dict(record.get("assets") or {})
    mode = assets.pop("mode", None)
    for config in (mdr.BlobAssetConfig, mdr.FileAssetConfig):
        if mode == config.form:
            return config(**assets)
    return None


def reduce_version(
    version: DatasetVersion, persisted: PersistedManifests | None = None
) -> DatasetSummary:
    """Run the reducer over ``version``'s persisted manifests; returns the summary it wrote.

    Refuses a version with no completed write, one older than the published version and
    one begun before the published version was (another run published first).
    ``persisted`` is the version's manifests when the caller has read them already.
    """
    run_id = version.engine_run_id
    if not run_id:
        raise RuntimeError(
            f"{version.describe()} has no completed write (state {version.state!r}); "
            "materialize the dataset asset again"
        )
    current = version.storage.current(version.asset_path, version.partition_key)
    version.storage.refuse_superseded(version, current)
    refuse_moved_pointer(version, current)
    fmt = version.format
    return finalize_output(
        fmt,
        version.url,
        run_id,
        assets=asset_config_from_record(version.record),
        storage_options=version.storage_options or None,
        persisted=persisted,
        sink_options=lerobot_sink_options(version) if fmt == LEROBOT_FORMAT else None,
    )


def audit_version(
    version: DatasetVersion, summary: DatasetSummary, policy: AuditPolicy
) -> list[dg.AssetCheckResult]:
    """The ``missing_assets`` and ``reference_integrity`` results of a reduced version, and
    ``video_integrity`` (always an ERROR when it fails) for a LeRobot version."""
    missing = missing_assets_result(summary, max_missing_fraction=policy.max_missing_fraction)
    report = scan_references(
        version,
        sample_threshold=policy.sample_threshold,
        sample_size=policy.sample_size,
        seed=policy.seed,
        summary=summary,
    )
    integrity = integrity_result(report)
    results = [
        _named(missing, MISSING_ASSETS_CHECK),
        _named(integrity, REFERENCE_INTEGRITY_CHECK),
    ]
    if version.format == LEROBOT_FORMAT:
        results.append(video_integrity_result(version))
    return results


def _named(result: dg.AssetCheckResult, name: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=name,
        passed=result.passed,
        severity=result.severity,
        metadata=result.metadata,
        description=result.description,
    )


def error_failures(results: list[dg.AssetCheckResult]) -> list[str]:
    """Names of the checks that failed with ERROR severity (these block publication)."""
    return [
        str(r.check_name)
        for r in results
        if not r.passed and r.severity == dg.AssetCheckSeverity.ERROR
    ]


def publish_version(
    version: DatasetVersion,
    summary: DatasetSummary,
    *,
    is_live: RunLiveness | None = None,
    retention: Retention | None = None,
    published_by: str | None = None,
) -> DatasetVersion:
    """Move the pointer to ``version``, then delete older versions beyond its retention
    (``retention``, else the one it was written with) that no live run is using.

    One run publishes a partition at a time, and only over the version that was published
    when ``version`` began: if another run published since, ``SupersededError`` names it
    (:mod:`.one_publisher`). The pointer moves only while the version's summary is still
    the one this reduction wrote; if another run finalized the folder meanwhile,
    :class:`mdr.OwnershipLost` names it. Either way readers keep the version they had.
    """
    with publishing(version, first=lambda: _check_still_ours(version, summary)) as previous:
        policy = {"retention": retention.as_record()} if retention is not None else {}
        return version.storage.publish_over(
            version,
            previous,
            is_live=is_live,
            published_by=published_by,
            **policy,
            rows_written=summary.rows_written,
            files_written=summary.counters.get("files_written", 0),
            first_file=summary.files[0] if summary.files else None,
        )


def _check_still_ours(version: DatasetVersion, summary: DatasetSummary) -> None:
    current = DatasetSummary.read(version.output_folder())
    if current.run_id != summary.run_id:
        raise mdr.OwnershipLost(
            f"{version.describe()}: run {current.run_id} took the output folder over and "
            f"finalized it after run {summary.run_id} did; the pointer was not moved. "
            "Materialize the asset again once that run is done",
            winner=current.run_id,
        )


def audit_failure(
    version: DatasetVersion, failed: list[str], results: list[dg.AssetCheckResult]
) -> AuditFailedError:
    """The error of a blocked publication: which checks failed, what readers still see."""
    current = version.storage.current(version.asset_path, version.partition_key)
    still = f"version {current.name}" if current is not None else "no version (none published yet)"
    details = "; ".join(
        f"{r.check_name}: {r.description or 'failed'}" for r in results if r.check_name in failed
    )
    return AuditFailedError(
        f"{version.describe()} was not published: check(s) {', '.join(failed)} failed "
        f"({details}). Readers still see {still}. Fix the data (or the check's threshold) and "
        "materialize the dataset asset again",
        failed,
        results,
    )


def run_liveness(instance: dg.DagsterInstance | None) -> RunLiveness | None:
    """``run id -> still running?`` from the Dagster instance (``None`` without one)."""
    if instance is None:
        return None

    def is_live(run_id: str) -> bool:
        run = instance.get_run_by_id(run_id)
        return run is not None and not run.is_finished

    return is_live

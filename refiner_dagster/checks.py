"""Asset checks on a published dataset version: missing assets and reference integrity.

``build_dataset_checks(finalization_asset)`` returns two checks on the finalization
asset (they run after it published the version):

- ``missing_assets``: passes when no source asset was missing; with ``set_null`` or
  ``drop_row`` and missing assets, it fails with WARN severity and the counts.
- ``reference_integrity``: every blob reference ``{path, offset, size}`` lies inside
  its block (the block exists and ``offset + size <= block size``), and with the
  file IO manager every copied file exists. Above ``sample_threshold`` references a
  uniform random sample of ``sample_size`` is checked and the rate reported. References
  that carry a checksum (``BlobAssetConfig(checksum=...)``) have it verified too: all of
  them up to ``checksum_full_below``, a seeded ``checksum_sample_rate`` above that.
  Each write attempt already checked the references it wrote and recorded the result in
  its manifest; the check adds the failures they recorded (summed in the version's
  summary), so a broken reference fails it even when the sample misses it. When every
  attempt recorded a passing audit, the check re-reads only the files of a seeded sample
  of attempts (``sample_files``, 64 by default) and re-checks their references, which
  catches a manifest that claims more than is true when the sample reaches it; the files
  of attempts that recorded no audit are read in full.
"""

import warnings
from dataclasses import dataclass
from typing import Any

import dagster as dg

import refiner_core as mdr

from .checksum_audit import DEFAULT_CHECKSUM_FULL_BELOW, DEFAULT_CHECKSUM_SAMPLE_RATE
from .reference_scan import (
    DEFAULT_SAMPLE_FILES,
    DEFAULT_SAMPLE_SIZE,
    DEFAULT_SAMPLE_THRESHOLD,
    IntegrityReport,
    scan_references,
)
from .settings import DATASET_KEY, unwrap_metadata, validate_asset_metadata
from .storage import DatasetVersion

# Definition metadata of a finalization asset that audits before publishing.
AUDITS_KEY = "refiner/audits"
MISSING_ASSETS_CHECK = "missing_assets"
REFERENCE_INTEGRITY_CHECK = "reference_integrity"


def missing_fraction(summary: mdr.DatasetSummary | None) -> float:
    """Missing source assets over all the source assets the write met (0 when none)."""
    counters = summary.counters if summary is not None else {}
    missing = counters.get("missing_assets", 0)
    seen = missing + counters.get("assets_written", 0)
    return missing / seen if seen else 0.0


def missing_assets_result(
    summary: mdr.DatasetSummary | None, *, max_missing_fraction: float | None = None
) -> dg.AssetCheckResult:
    """Pass when nothing was missing; otherwise a WARN with what the policy did, or an
    ERROR when the missing fraction is above ``max_missing_fraction``."""
    counters = summary.counters if summary is not None else {}
    policy = summary.missing_policy if summary is not None else None
    missing = counters.get("missing_assets", 0)
    fraction = missing_fraction(summary)
    metadata: dict[str, dg.MetadataValue] = {
        "missing_assets": dg.MetadataValue.int(missing),
        "cells_nulled": dg.MetadataValue.int(counters.get("cells_nulled", 0)),
        "rows_dropped": dg.MetadataValue.int(counters.get("rows_dropped", 0)),
        "missing_policy": dg.MetadataValue.text(str(policy or "none")),
    }
    if max_missing_fraction is not None:
        metadata["missing_fraction"] = dg.MetadataValue.float(round(fraction, 6))
        metadata["max_missing_fraction"] = dg.MetadataValue.float(float(max_missing_fraction))
    if missing == 0:
        return dg.AssetCheckResult(passed=True, metadata=metadata)
    description = (
        f"{missing} source asset(s) were missing: {counters.get('cells_nulled', 0)} cell(s) set "
        f"to null, {counters.get('rows_dropped', 0)} row(s) dropped "
        f"(missing_policy={policy!r})"
    )
    too_many = max_missing_fraction is not None and fraction > max_missing_fraction
    if too_many:
        description += (
            f"; {fraction:.2%} of the source assets are missing, above max_missing_fraction="
            f"{max_missing_fraction}"
        )
    return dg.AssetCheckResult(
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR if too_many else dg.AssetCheckSeverity.WARN,
        metadata=metadata,
        description=description,
    )


def integrity_result(report: IntegrityReport) -> dg.AssetCheckResult:
    metadata: dict[str, dg.MetadataValue] = {
        "references_total": dg.MetadataValue.int(report.total),
        "references_checked": dg.MetadataValue.int(report.checked),
        "sampling_rate": dg.MetadataValue.float(round(report.sampling_rate, 6)),
        "blocks_checked": dg.MetadataValue.int(report.blocks),
        "failures": dg.MetadataValue.int(report.failure_count),
        "checksums_verified": dg.MetadataValue.int(report.checksums_verified),
        "checksum_failures": dg.MetadataValue.int(report.checksum_failures),
        "inherited_references_checked": dg.MetadataValue.int(report.inherited_checked),
        "references_checked_at_write": dg.MetadataValue.int(report.checked_at_write),
        "attempts_audited_at_write": dg.MetadataValue.int(report.attempts_audited),
        "failures_recorded_at_write": dg.MetadataValue.int(report.failures_at_write),
    }
    if report.failures:
        metadata["first_failures"] = dg.MetadataValue.md(
            "\n".join(f"- {line}" for line in report.failures)
        )
    description = None
    found = report.failure_count - report.failures_at_write
    if found:
        description = f"{found} of {report.checked} re-checked reference(s) are broken"
    if report.failures_at_write:
        description = (
            f"{report.failures_at_write} broken reference(s) recorded by the write attempts"
            + (f"; {description}" if description else "")
        )
    return dg.AssetCheckResult(
        passed=report.failure_count == 0, metadata=metadata, description=description
    )


def build_dataset_checks(
    asset: dg.AssetsDefinition,
    *,
    sample_threshold: int = DEFAULT_SAMPLE_THRESHOLD,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    blocking: bool = False,
    max_missing_fraction: float | None = None,
    checksum_sample_rate: float = DEFAULT_CHECKSUM_SAMPLE_RATE,
    checksum_full_below: int = DEFAULT_CHECKSUM_FULL_BELOW,
    sample_files: int = DEFAULT_SAMPLE_FILES,
) -> list[dg.AssetChecksDefinition]:
    """Missing-asset and reference-integrity checks on a dataset's published version.

    ``asset`` is either a finalization asset from
    :func:`~refiner_dagster.build_finalization_asset` built with ``checks=False``, or a
    dataset asset published inline (``refiner/finalize_inline``); the checks read the
    version it published through the dataset's refiner IO manager and never load media
    bytes. A finalization asset built with ``checks=True`` (the default) already runs
    both checks before publishing, as its own ``check_specs``: for it this returns an
    empty list (and refuses check options, which belong to ``build_finalization_asset``).
    ``sample_files``: how many attempts' files ``reference_integrity`` re-reads when every
    attempt audited its own references.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import build_dataset_checks, build_finalization_asset
        >>> @dg.asset(io_manager_key="refiner", metadata={"refiner/finalize_inline": True})
        ... def episodes() -> mdr.Pipeline:
        ...     return mdr.from_items([{"episode": 1}])
        >>> checks = build_dataset_checks(episodes, max_missing_fraction=0.05)
        >>> sorted(c.check_key.name for c in checks)
        ['missing_assets', 'reference_integrity']
        >>> build_dataset_checks(build_finalization_asset(episodes))
        []
    """
    if not isinstance(asset, dg.AssetsDefinition) or len(asset.keys) != 1:
        raise TypeError(
            "build_dataset_checks takes a finalization asset (build_finalization_asset) or an "
            f"inline-finalized dataset asset, got {asset!r}"
        )
    metadata = asset.metadata_by_key.get(asset.key, {})
    if isinstance(sample_files, bool) or not isinstance(sample_files, int) or sample_files < 1:
        raise ValueError(f"sample_files must be a positive integer, got {sample_files!r}")
    options = {
        "sample_threshold": sample_threshold,
        "sample_size": sample_size,
        "seed": seed,
        "sample_files": sample_files,
    }
    checksum_options = {
        "checksum_sample_rate": checksum_sample_rate,
        "checksum_full_below": checksum_full_below,
    }
    if unwrap_metadata(metadata.get(AUDITS_KEY)):
        defaults = {
            "sample_threshold": DEFAULT_SAMPLE_THRESHOLD,
            "sample_size": DEFAULT_SAMPLE_SIZE,
            "sample_files": DEFAULT_SAMPLE_FILES,
        }
        if options != {**defaults, "seed": 0} or max_missing_fraction is not None:
            raise ValueError(
                f"{asset.key.to_user_string()} already runs missing_assets and "
                "reference_integrity before publishing; pass sample_threshold, sample_size, seed "
                "and max_missing_fraction to build_finalization_asset instead"
            )
        return []
    dataset = unwrap_metadata(metadata.get(DATASET_KEY))
    if dataset:
        dataset_key = dg.AssetKey.from_user_string(str(dataset))
    else:
        dataset_key = asset.key
        validate_asset_metadata(metadata, where=f"asset {dataset_key.to_user_string()}")
    io_key = asset.get_io_manager_key_for_asset_key(asset.key)
    target = asset.key
    check = _CheckTarget(
        target,
        dataset_key,
        io_key,
        asset.partitions_def,
        blocking,
        max_missing_fraction,
        {**options, **checksum_options},
    )
    with warnings.catch_warnings():
        # partitioned asset checks are a preview feature of Dagster; ours follow the asset's
        # partitions so each partition's version is checked on its own
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return _define_checks(check)


@dataclass(frozen=True)
class _CheckTarget:
    asset_key: dg.AssetKey
    dataset_key: dg.AssetKey
    io_manager_key: str
    partitions_def: dg.PartitionsDefinition | None
    blocking: bool
    max_missing_fraction: float | None
    options: dict[str, Any]


def _published(context: dg.AssetCheckExecutionContext, target: _CheckTarget) -> DatasetVersion:
    from .io_manager import writer_for  # the IO managers audit with this module's checks

    who = f"checks of {target.asset_key.to_user_string()}"
    storage = writer_for(context, target.io_manager_key, who).storage
    partition = context.partition_key if target.partitions_def is not None else None
    version = storage.current(target.dataset_key.path, partition)
    if version is None:
        where = f" partition {partition!r}" if partition is not None else ""
        raise FileNotFoundError(
            f"asset {target.dataset_key.to_user_string()}{where} has no published version under "
            f"{storage.url}: materialize it (and its finalization) before running its checks"
        )
    return version


def _define_checks(target: _CheckTarget) -> list[dg.AssetChecksDefinition]:
    sample_threshold = target.options["sample_threshold"]

    @dg.asset_check(
        asset=target.asset_key,
        name=MISSING_ASSETS_CHECK,
        required_resource_keys={target.io_manager_key},
        blocking=target.blocking,
        partitions_def=target.partitions_def,
        description="Source assets that were missing, and what the missing policy did.",
    )
    def _missing(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        version = _published(context, target)
        return missing_assets_result(
            version.summary(), max_missing_fraction=target.max_missing_fraction
        )

    @dg.asset_check(
        asset=target.asset_key,
        name=REFERENCE_INTEGRITY_CHECK,
        required_resource_keys={target.io_manager_key},
        blocking=target.blocking,
        partitions_def=target.partitions_def,
        description=(
            "Every blob reference lies inside an existing block (offset + size <= block size); "
            f"sampled above {sample_threshold:,} references; checksums, where references carry "
            "them, are verified too (all of them on small datasets)."
        ),
    )
    def _integrity(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        return integrity_result(scan_references(_published(context, target), **target.options))

    return [_missing, _integrity]

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
  summary), so a broken reference fails it even when the sample misses it, and the
  sample it re-checks itself catches a manifest that claims more than is true.
"""

import random
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

import refiner_core as mdr
from refiner_core.io import resolve, validate_reference

from .checksum_audit import (
    DEFAULT_CHECKSUM_FULL_BELOW,
    DEFAULT_CHECKSUM_SAMPLE_RATE,
    verify_checksums,
)
from .settings import DATASET_KEY, unwrap_metadata, validate_asset_metadata
from .storage import DatasetVersion
from .tables import open_version, version_schema

# Definition metadata of a finalization asset that audits before publishing.
AUDITS_KEY = "refiner/audits"
MISSING_ASSETS_CHECK = "missing_assets"
REFERENCE_INTEGRITY_CHECK = "reference_integrity"
DEFAULT_SAMPLE_THRESHOLD = 100_000
DEFAULT_SAMPLE_SIZE = 10_000
_SHOWN_FAILURES = 5


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


@dataclass
class _Reference:
    column: str
    row: int
    path: str
    offset: int | None = None
    size: int | None = None
    checksum: str | None = None


@dataclass
class IntegrityReport:
    """What the integrity scan found (also usable outside Dagster)."""

    total: int = 0
    checked: int = 0
    blocks: int = 0
    failures: list[str] = field(default_factory=list)
    failure_count: int = 0
    checksums_verified: int = 0
    checksum_failures: int = 0
    checked_at_write: int = 0
    attempts_audited: int = 0
    failures_at_write: int = 0

    @property
    def sampling_rate(self) -> float:
        return 1.0 if self.total == 0 else self.checked / self.total


def _asset_columns(schema: Any) -> dict[str, str]:
    columns = {}
    for f in schema or []:
        info = mdr.datatype.asset_of(f)
        if info is not None and info.form in ("blob", "path"):
            columns[f.name] = info.form
    return columns


def _iter_references(pipeline: mdr.Pipeline, columns: dict[str, str]) -> Iterator[_Reference]:
    for index, row in enumerate(pipeline.iter_rows()):
        for name, form in columns.items():
            value = row.get(name)
            values = value if isinstance(value, list) else [value]
            for item in values:
                if item is None:
                    continue
                if form == "blob":
                    yield _Reference(
                        name,
                        index,
                        item.get("path"),
                        item.get("offset"),
                        item.get("size"),
                        item.get("checksum"),
                    )
                else:
                    yield _Reference(name, index, item)


def _sample(refs: Iterator[_Reference], threshold: int, size: int, seed: int):
    """All references up to ``threshold``; beyond, a uniform sample of ``size`` (Algorithm R)."""
    rng = random.Random(seed)
    everything: list[_Reference] | None = []
    reservoir: list[_Reference] = []
    total = 0
    for ref in refs:
        total += 1
        if everything is not None:
            everything.append(ref)
            if len(everything) > threshold:
                everything = None
        if len(reservoir) < size:
            reservoir.append(ref)
        else:
            j = rng.randrange(total)
            if j < size:
                reservoir[j] = ref
    return total, (everything if everything is not None else reservoir)


def scan_references(
    version: DatasetVersion,
    *,
    sample_threshold: int = DEFAULT_SAMPLE_THRESHOLD,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    checksum_sample_rate: float = DEFAULT_CHECKSUM_SAMPLE_RATE,
    checksum_full_below: int = DEFAULT_CHECKSUM_FULL_BELOW,
    summary: mdr.DatasetSummary | None = None,
) -> IntegrityReport:
    """Check the references of ``version``'s asset columns against storage, after the
    failures its write attempts recorded (from ``summary``, else the version's own)."""
    columns = _asset_columns(version_schema(version))
    report = IntegrityReport()
    _add_write_audit(report, summary if summary is not None else version.summary())
    if not columns:
        return report
    pipeline = open_version(version, columns=list(columns))
    total, chosen = _sample(
        _iter_references(pipeline, columns), sample_threshold, sample_size, seed
    )
    report.total, report.checked = total, len(chosen)
    sizes: dict[str, int | None] = {}
    intact: list[_Reference] = []
    for ref in chosen:
        problem = _check(ref, sizes, version)
        if problem:
            report.failure_count += 1
            if len(report.failures) < _SHOWN_FAILURES:
                report.failures.append(problem)
        elif ref.checksum:
            intact.append(ref)
    report.blocks = len(sizes)
    _verify_checksums(report, intact, version, checksum_sample_rate, checksum_full_below, seed)
    return report


def _add_write_audit(report: IntegrityReport, summary: mdr.DatasetSummary | None) -> None:
    """Count in the reference audits the write attempts recorded in their manifests."""
    audit = summary.reference_audit if summary is not None else None
    if audit is None:
        return
    report.checked_at_write = audit.checked
    report.attempts_audited = audit.attempts
    report.failures_at_write = audit.failure_count
    report.failure_count += audit.failure_count
    report.failures.extend(
        f"recorded at write: {failure.describe()}" for failure in audit.failures[:_SHOWN_FAILURES]
    )


def _verify_checksums(report, refs, version, rate, full_below, seed) -> None:
    """Verify the checksums of in-bounds references (a sample on large datasets)."""
    pairs = [
        (
            f"column {r.column!r} row {r.row}",
            {"path": r.path, "offset": r.offset, "size": r.size, "checksum": r.checksum},
        )
        for r in refs
    ]
    audit = verify_checksums(
        pairs,
        rate=rate,
        full_below=full_below,
        seed=seed,
        storage_options=_options_for(pairs[0][1]["path"], version) if pairs else None,
    )
    report.checksums_verified = audit.verified
    report.checksum_failures = audit.failure_count
    report.failure_count += audit.failure_count
    report.failures.extend(audit.failures[: max(0, _SHOWN_FAILURES - len(report.failures))])


def _options_for(path: str, version: DatasetVersion) -> dict[str, Any] | None:
    """The version's storage options for a path on the version's store, else none."""
    same_store = "://" in path and path.split("://", 1)[0] == version.url.split("://", 1)[0]
    return (version.storage_options or None) if same_store and "://" in version.url else None


def _size_of(path: str, sizes: dict[str, int | None], version: DatasetVersion) -> int | None:
    if path not in sizes:
        same_store = "://" in path and path.split("://", 1)[0] == version.url.split("://", 1)[0]
        options = version.storage_options if same_store and "://" in version.url else None
        fs, fs_path = resolve(path, options or None)
        try:
            sizes[path] = int(fs.size(fs_path))
        except (FileNotFoundError, OSError):
            sizes[path] = None
    return sizes[path]


def _check(ref: _Reference, sizes: dict[str, int | None], version: DatasetVersion) -> str | None:
    where = f"column {ref.column!r} row {ref.row}"
    if not isinstance(ref.path, str) or not ref.path:
        return f"{where}: empty path"
    size = _size_of(ref.path, sizes, version)
    if size is None:
        kind = "block" if ref.offset is not None else "file"
        return f"{where}: {kind} {ref.path} does not exist"
    if ref.offset is None:
        return None
    try:
        validate_reference({"path": ref.path, "offset": ref.offset, "size": ref.size})
    except ValueError as exc:
        return f"{where}: malformed reference: {exc}"
    if ref.size is None:
        return f"{where}: malformed reference: it has an offset but no size"
    if ref.offset + ref.size > size:
        return (
            f"{where}: range [{ref.offset}, {ref.offset + ref.size}) of {ref.path} "
            f"reaches past the block's {size} bytes"
        )
    return None


def integrity_result(report: IntegrityReport) -> dg.AssetCheckResult:
    metadata: dict[str, dg.MetadataValue] = {
        "references_total": dg.MetadataValue.int(report.total),
        "references_checked": dg.MetadataValue.int(report.checked),
        "sampling_rate": dg.MetadataValue.float(round(report.sampling_rate, 6)),
        "blocks_checked": dg.MetadataValue.int(report.blocks),
        "failures": dg.MetadataValue.int(report.failure_count),
        "checksums_verified": dg.MetadataValue.int(report.checksums_verified),
        "checksum_failures": dg.MetadataValue.int(report.checksum_failures),
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
) -> list[dg.AssetChecksDefinition]:
    """Missing-asset and reference-integrity checks on a dataset's published version.

    ``asset`` is either a finalization asset from
    :func:`~refiner_dagster.build_finalization_asset` built with ``checks=False``, or a
    dataset asset published inline (``refiner/finalize_inline``); the checks read the
    version it published through the dataset's refiner IO manager and never load media
    bytes. A finalization asset built with ``checks=True`` (the default) already runs
    both checks before publishing, as its own ``check_specs``: for it this returns an
    empty list (and refuses check options, which belong to ``build_finalization_asset``).

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
    options = {"sample_threshold": sample_threshold, "sample_size": sample_size, "seed": seed}
    checksum_options = {
        "checksum_sample_rate": checksum_sample_rate,
        "checksum_full_below": checksum_full_below,
    }
    if unwrap_metadata(metadata.get(AUDITS_KEY)):
        defaults = {
            "sample_threshold": DEFAULT_SAMPLE_THRESHOLD,
            "sample_size": DEFAULT_SAMPLE_SIZE,
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

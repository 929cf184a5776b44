"""The ``reference_integrity`` scan: a version's references checked against storage.

:func:`scan_references` reads the version's table (asset columns only), keeps every
reference up to ``sample_threshold`` or a seeded uniform sample of ``sample_size``
above it, sizes the blocks and files they point at, and checks each reference lies
inside its block (or its file exists); checksums are verified for all or a sample of
the in-bounds references that carry one. An appended version's own tables are read
whole; what it shares with the versions before it is checked by a seeded sample
(up to ``INHERITED_SAMPLE_TABLES`` tables, ``sample_size`` references). Table files are read, and paths sized,
``threads`` at a time. The failures the write attempts recorded in their manifests
(summed in the version's summary) are counted in first.

When every kept attempt of a Parquet or JSONL version audited its own references and
none failed, the scan trusts those audits and re-verifies only a seeded sample: the
files of ``sample_files`` attempts (:func:`sampled_files`), at most ``sample_size`` of
their references, so a manifest that claims more than is true can still be caught;
the files of attempts that recorded no audit (``summary.unaudited_files``) are read in
full, as without audits.

Example:
    >>> report = IntegrityReport(total=4, checked=2)
    >>> report.sampling_rate
    0.5
"""

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import refiner_core as mdr
from refiner_core.io import (
    DEFAULT_READ_THREADS,
    file_sizes,
    map_in_order,
    pooled_options,
    read_table_rows,
    validate_reference,
)

from .append import version_inheritance
from .checksum_audit import (
    DEFAULT_CHECKSUM_FULL_BELOW,
    DEFAULT_CHECKSUM_SAMPLE_RATE,
    verify_checksums,
)
from .storage import DatasetVersion
from .tables import open_version, version_schema

DEFAULT_SAMPLE_THRESHOLD = 100_000
DEFAULT_SAMPLE_SIZE = 10_000
INHERITED_SAMPLE_TABLES = 8
# Attempts whose files are re-verified when every attempt audited itself.
DEFAULT_SAMPLE_FILES = 64
SHOWN_FAILURES = 5


@dataclass
class _Reference:
    column: str
    row: int
    path: str
    offset: int | None = None
    size: int | None = None
    checksum: str | None = None
    file: str | None = None
    """The table file the row is in (``row`` counts within it); ``None``: the whole table."""

    @property
    def where(self) -> str:
        of = f" of {self.file}" if self.file else ""
        return f"column {self.column!r} row {self.row}{of}"


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
    inherited_checked: int = 0
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


def _version_rows(version: DatasetVersion, columns: list[str], threads: int) -> Iterator[Any]:
    """The rows of ``version``'s table (asset ``columns`` only); Parquet and JSONL files
    are read ``threads`` at a time, in the summary's order."""
    summary = version.summary()
    if version.format not in ("parquet", "jsonl") or summary is None:
        yield from open_version(version, columns=columns).iter_rows()
        return
    folder = version.output_folder()
    # its own files only: what an append shares was audited when it was published
    urls = [folder.url_of(relative) for relative in summary.files]
    yield from _table_rows(version, urls, columns, threads)


def _table_rows(
    version: DatasetVersion, urls: list[str], columns: list[str], threads: int
) -> Iterator[Any]:
    options = pooled_options(version.url, version.storage_options or None, threads)

    def read(url: str) -> list[dict[str, Any]]:
        return read_table_rows(url, version.format, columns=columns, storage_options=options)

    for rows in map_in_order(read, urls, max_workers=max(1, threads)):
        yield from rows


def _inherited_sample(
    version: DatasetVersion, columns: dict[str, str], size: int, seed: int, threads: int
) -> list[_Reference]:
    """A seeded sample of the references an appended version shares with the versions
    before it: up to ``INHERITED_SAMPLE_TABLES`` of its inherited table files, and at
    most ``size`` references from them."""
    inheritance = version_inheritance(version)
    if inheritance is None or not inheritance.tables or size <= 0:
        return []
    rng = random.Random(seed)
    tables = list(inheritance.tables)
    picked = sorted(rng.sample(tables, min(INHERITED_SAMPLE_TABLES, len(tables))))
    refs: list[_Reference] = []
    for table in picked:
        rows = _table_rows(version, [version.folder.url_of(table)], list(columns), threads)
        for ref in _iter_references(rows, columns):
            ref.file = f"inherited table {table}"
            refs.append(ref)
    _, chosen = _sample(iter(refs), size, size, seed)
    return chosen


def _file_rows(
    version: DatasetVersion, files: Sequence[str], columns: list[str], threads: int
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``(file, its rows)`` for each of ``files`` (relative to the version's output),
    asset ``columns`` only, read ``threads`` at a time, in the order given."""
    folder = version.output_folder()
    options = pooled_options(version.url, version.storage_options or None, threads)

    def read(relative: str) -> tuple[str, list[dict[str, Any]]]:
        url = folder.url_of(relative)
        return relative, read_table_rows(
            url, version.format, columns=columns, storage_options=options
        )

    yield from map_in_order(read, files, max_workers=max(1, threads))


def _file_references(
    chunks: Iterable[tuple[str, list[dict[str, Any]]]], columns: dict[str, str]
) -> Iterator[_Reference]:
    for relative, rows in chunks:
        for ref in _iter_references(iter(rows), columns):
            ref.file = relative
            yield ref


def _iter_references(rows: Iterator[Any], columns: dict[str, str]) -> Iterator[_Reference]:
    for index, row in enumerate(rows):
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


def sampled_files(files: Sequence[str], count: int, seed: int) -> list[str]:
    """The ``count`` of ``files`` (each an attempt's) whose references are re-verified
    when every attempt audited itself: a seeded uniform choice, in the order given.

    >>> sampled_files(["a", "b", "c", "d"], 2, seed=0) == sampled_files(["a", "b", "c", "d"], 2, 0)
    True
    >>> sampled_files(["a", "b"], 5, seed=0)
    ['a', 'b']
    """
    if count >= len(files):
        return list(files)
    chosen = set(random.Random(seed).sample(range(len(files)), count))
    return [f for i, f in enumerate(files) if i in chosen]


def _trusted_audit(version: DatasetVersion, summary: mdr.DatasetSummary | None) -> bool:
    """Whether the attempts' own audits stand for the files they cover: they passed, the
    summary says which files no attempt audited, and the table is one file per attempt."""
    if summary is None or version.format not in ("parquet", "jsonl"):
        return False
    audit = summary.reference_audit
    return audit is not None and audit.ok and summary.unaudited_files is not None


def scan_references(
    version: DatasetVersion,
    *,
    sample_threshold: int = DEFAULT_SAMPLE_THRESHOLD,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    checksum_sample_rate: float = DEFAULT_CHECKSUM_SAMPLE_RATE,
    checksum_full_below: int = DEFAULT_CHECKSUM_FULL_BELOW,
    summary: mdr.DatasetSummary | None = None,
    threads: int = DEFAULT_READ_THREADS,
    sample_files: int = DEFAULT_SAMPLE_FILES,
) -> IntegrityReport:
    """Check the references of ``version``'s asset columns against storage, after the
    failures its write attempts recorded (from ``summary``, else the version's own).

    When the attempts audited themselves (see the module), only the files of
    ``sample_files`` of them, chosen with ``seed``, are re-verified, plus in full those
    of attempts that recorded no audit. Table files are read, and the referenced blocks
    and files sized, ``threads`` at a time (``1``: one request at a time)."""
    if isinstance(sample_files, bool) or not isinstance(sample_files, int) or sample_files < 1:
        raise ValueError(f"sample_files must be a positive integer, got {sample_files!r}")
    columns = _asset_columns(version_schema(version))
    report = IntegrityReport()
    summary = summary if summary is not None else version.summary()
    _add_write_audit(report, summary)
    if not columns:
        return report
    if summary is not None and _trusted_audit(version, summary):
        chosen = _trusted_sample(
            report,
            version,
            summary,
            columns,
            threads,
            sample_threshold,
            sample_size,
            seed,
            sample_files,
        )
    else:
        rows = _version_rows(version, list(columns), threads)
        refs = _iter_references(rows, columns)
        total, chosen = _sample(refs, sample_threshold, sample_size, seed)
        report.total, report.checked = total, len(chosen)
    inherited = _inherited_sample(version, columns, sample_size, seed, threads)
    report.total += len(inherited)
    report.checked += len(inherited)
    report.inherited_checked = len(inherited)
    chosen = chosen + inherited
    sizes = _sizes(chosen, version, threads)
    intact: list[_Reference] = []
    for ref in chosen:
        problem = _check(ref, sizes)
        if problem:
            report.failure_count += 1
            if len(report.failures) < SHOWN_FAILURES:
                report.failures.append(problem)
        elif ref.checksum:
            intact.append(ref)
    report.blocks = len(sizes)
    _verify_checksums(report, intact, version, checksum_sample_rate, checksum_full_below, seed)
    return report


def _trusted_sample(
    report: IntegrityReport,
    version: DatasetVersion,
    summary: mdr.DatasetSummary,
    columns: dict[str, str],
    threads: int,
    threshold: int,
    size: int,
    seed: int,
    sample_files: int,
) -> list[_Reference]:
    """The references to re-verify of a version whose attempts audited themselves: all
    of the unaudited files' (up to ``threshold``), and at most ``size`` of the sampled
    files'; sets the report's ``total`` (the audited references counted at write) and
    ``checked``."""
    unaudited = set(summary.unaudited_files or ())
    audited = [f for f in summary.files if f not in unaudited]
    picked = sampled_files(audited, sample_files, seed)
    full_total, full = _sample(
        _file_references(_file_rows(version, sorted(unaudited), list(columns), threads), columns),
        threshold,
        size,
        seed,
    )
    _, sampled = _sample(
        _file_references(_file_rows(version, picked, list(columns), threads), columns),
        min(threshold, size),
        size,
        seed,
    )
    audit = summary.reference_audit
    report.total = full_total + (audit.checked if audit is not None else 0)
    report.checked = len(full) + len(sampled)
    return full + sampled


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
        f"recorded at write: {failure.describe()}" for failure in audit.failures[:SHOWN_FAILURES]
    )


def _verify_checksums(report, refs, version, rate, full_below, seed) -> None:
    """Verify the checksums of in-bounds references (a sample on large datasets)."""
    pairs = [
        (
            r.where,
            {"path": r.path, "offset": r.offset, "size": r.size, "checksum": r.checksum},
        )
        for r in refs
    ]
    audit = verify_checksums(
        pairs,
        rate=rate,
        full_below=full_below,
        seed=seed,
        storage_options=_checksum_options(pairs[0][1]["path"], version) if pairs else None,
    )
    report.checksums_verified = audit.verified
    report.checksum_failures = audit.failure_count
    report.failure_count += audit.failure_count
    report.failures.extend(audit.failures[: max(0, SHOWN_FAILURES - len(report.failures))])


def _options_for(path: str, version: DatasetVersion) -> dict[str, Any] | None:
    """The version's storage options for a path on the version's store, else none."""
    same_store = "://" in path and path.split("://", 1)[0] == version.url.split("://", 1)[0]
    return (version.storage_options or None) if same_store and "://" in version.url else None


def _checksum_options(path: str, version: DatasetVersion) -> dict[str, Any] | None:
    """The options the checksum reads of ``path`` use: the version's, on its own store,
    with a connection for each of ``iter_blobs``' reads in flight (16, as many as the
    scan's default threads)."""
    options = _options_for(path, version)
    return pooled_options(path, options, DEFAULT_READ_THREADS) if options is not None else None


def _sizes(refs: list[_Reference], version: DatasetVersion, threads: int) -> dict[str, int | None]:
    """The size of every path ``refs`` point at (``None``: absent), looked up
    ``threads`` at a time; the version's storage options apply on its own store."""
    paths = {r.path for r in refs if isinstance(r.path, str) and r.path}
    on_store = {p for p in paths if _options_for(p, version) is not None}
    sizes = file_sizes(on_store, storage_options=version.storage_options, max_workers=threads)
    sizes.update(file_sizes(paths - on_store, max_workers=threads))
    return sizes


def _check(ref: _Reference, sizes: dict[str, int | None]) -> str | None:
    where = ref.where
    if not isinstance(ref.path, str) or not ref.path:
        return f"{where}: empty path"
    size = sizes.get(ref.path)
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

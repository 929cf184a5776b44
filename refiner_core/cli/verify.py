"""Check that every reference in an output resolves: blobs within their block, files present.

A blob reference ``{path, offset, size}`` must lie inside its block (``offset + size``
at most the block's size); with a ``checksum`` (``"sha256:<hex>"`` or ``"crc32c:<hex>"``)
the range's digest must match. A path cell must name an existing file. The table files
the summary lists must exist too. Block sizes are looked up once per block.

A LeRobot dataset (``meta/info.json`` with a ``codebase_version``) is checked with
:func:`refiner_core.verify_video` instead: every episode's video against its table.

Example:
    >>> import os, tempfile, refiner_core as mdr
    >>> from refiner_core.cli.storage import open_output
    >>> from refiner_core.cli.verify import verify_output
    >>> src, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> path = os.path.join(src, "a.png")
    >>> _ = open(path, "wb").write(b"png bytes")
    >>> pipeline = mdr.from_items([{"image": path}], dtypes={"image": mdr.datatype.image_path()})
    >>> _ = pipeline.write_parquet(out, assets=mdr.BlobAssetConfig()).launch_local()
    >>> report = verify_output(open_output(out))
    >>> report.ok, report.blobs, report.failures
    (True, 1, [])
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..io.checksum import CHECKSUM_ALGORITHMS, checksum_of
from ..io.datafile import DataFolder, full_url, resolve
from ..io.parallel_reads import DEFAULT_READ_THREADS, file_sizes, pooled_options
from .rows import Reference, TableRow, asset_columns, asset_prefixes, iter_rows, references
from .storage import StoredOutput

if TYPE_CHECKING:
    from rich.console import Console

    from ..video.audit import VideoAudit


# References whose files are sized together (concurrently) before they are checked.
SIZE_WINDOW = 4096


@dataclass
class VerifyReport:
    """What was checked and every failure found (``failures`` holds the first ``limit``)."""

    rows: int = 0
    blobs: int = 0
    paths: int = 0
    checksums: int = 0
    failure_count: int = 0
    failures: list[str] = field(default_factory=list)
    limit: int = 20

    @property
    def ok(self) -> bool:
        return self.failure_count == 0

    def fail(self, message: str) -> None:
        self.failure_count += 1
        if len(self.failures) < self.limit:
            self.failures.append(message)


class _Sizes:
    """Sizes of the files references point at, one lookup per file; :meth:`prefetch`
    looks a batch up concurrently."""

    def __init__(self, storage_options: dict[str, Any], threads: int = 1) -> None:
        self.storage_options = storage_options
        self.threads = threads
        self._known: dict[str, int | None] = {}

    def prefetch(self, urls: Iterable[Any]) -> None:
        """Look up, ``threads`` at a time, the sizes of the URLs not known yet."""
        unknown = [u for u in urls if isinstance(u, str) and u and u not in self._known]
        options = self.storage_options or None
        self._known.update(file_sizes(unknown, storage_options=options, max_workers=self.threads))

    def size(self, url: str) -> int | None:
        """The file's size in bytes, ``None`` when it does not exist."""
        if url not in self._known:
            self.prefetch([url])
        return self._known[url]


def _check_blob(ref: Reference, row: TableRow, sizes: _Sizes, report: VerifyReport) -> bool:
    """Check that ``ref`` lies inside its block; ``True`` when it does."""
    where = f"{row.where()}, {ref.describe()}"
    offset, size = ref.offset, ref.size
    if not isinstance(offset, int) or not isinstance(size, int) or offset < 0 or size < 0:
        report.fail(f"{where}: malformed reference (offset and size must be integers >= 0)")
        return False
    if not ref.path:
        report.fail(f"{where}: the reference has an empty path")
        return False
    block = sizes.size(ref.path)
    if block is None:
        report.fail(f"{where}: the block does not exist")
        return False
    if offset + size > block:
        report.fail(
            f"{where}: reaches past the end of the block, which has {block} bytes "
            "(truncated or overwritten block; write the dataset again)"
        )
        return False
    return True


def _check_digests(
    pending: list[tuple[Reference, str]],
    storage_options: dict[str, Any],
    report: VerifyReport,
    threads: int,
) -> None:
    """Check the checksums of in-bounds references, read with ``iter_blobs``: one ranged
    read per run of nearby ranges of a block, ``threads`` blocks at a time, memory
    bounded."""
    from ..io import iter_blobs

    refs = ({"path": r.path, "offset": r.offset, "size": r.size} for r, _ in pending)
    read = iter_blobs(refs, storage_options=storage_options or None, max_in_flight=threads)
    for (ref, where), data in zip(pending, read, strict=True):
        algorithm, _, expected = str(ref.checksum).partition(":")
        if algorithm not in CHECKSUM_ALGORITHMS:
            report.fail(f"{where}: cannot check checksum {ref.checksum!r}: unknown algorithm")
            continue
        actual = checksum_of(data or b"", algorithm).partition(":")[2]
        report.checksums += 1
        if actual != expected.lower():
            report.fail(f"{where}: {algorithm} is {actual}, the reference says {expected}")


def verify_output(
    output: StoredOutput, *, limit: int = 20, threads: int = DEFAULT_READ_THREADS
) -> VerifyReport:
    """Check every reference and table file of ``output``; see the module docstring.

    Table files are read ``threads`` at a time, the blocks of each :data:`SIZE_WINDOW`
    references are sized concurrently and checksums read ``threads`` blocks at a time
    (``threads=1``: one request at a time); on S3 the client gets a connection per
    thread."""
    report = VerifyReport(limit=limit)
    options = pooled_options(output.url, output.storage_options, threads)
    if options is not output.storage_options:
        output = dataclasses.replace(output, folder=DataFolder(output.folder.url, options))
    sizes = _Sizes(output.storage_options, threads)
    fs = output.folder.fs
    tables = [full_url(fs, output.table_path(name)) for name in output.tables]
    sizes.prefetch(tables)
    for url in tables:
        if sizes.size(url) is None:
            report.fail(f"table file {url} is missing")
    if not report.ok:
        return report
    columns = asset_columns(output)
    prefixes = asset_prefixes(output)
    pending: list[tuple[Reference, str]] = []  # in-bounds references carrying a checksum
    window: list[tuple[TableRow, Reference]] = []
    for row in iter_rows(output, threads=threads):
        report.rows += 1
        window.extend((row, ref) for ref in references(row, columns, prefixes))
        if len(window) >= SIZE_WINDOW:
            _check_window(window, sizes, report, pending)
            window = []
    _check_window(window, sizes, report, pending)
    _check_digests(pending, output.storage_options, report, threads)
    expected = (output.summary or {}).get("rows_written")
    if expected is not None:  # an appended version also reads the rows it shares
        expected += output.rows_inherited
    if expected is not None and output.format != "lance" and report.rows != expected:
        report.fail(f"the table has {report.rows} rows; the summary says {expected}")
    return report


def _check_window(
    window: list[tuple[TableRow, Reference]],
    sizes: _Sizes,
    report: VerifyReport,
    pending: list[tuple[Reference, str]],
) -> None:
    """Check a window of references, their files sized together first."""
    sizes.prefetch(ref.path for _, ref in window)
    for row, ref in window:
        if ref.is_blob:
            report.blobs += 1
            if _check_blob(ref, row, sizes, report) and ref.checksum:
                pending.append((ref, f"{row.where()}, {ref.describe()}"))
        else:
            report.paths += 1
            if sizes.size(ref.path) is None:
                report.fail(f"{row.where()}, {ref.describe()}: the file does not exist")


def lerobot_version(root: str, storage_options: dict[str, Any] | None) -> str | None:
    """The ``codebase_version`` in ``root``'s ``meta/info.json``; ``None`` when ``root`` is
    not a LeRobot dataset."""
    fs, base = resolve(root, storage_options)
    try:
        with fs.open(posixpath.join(base, "meta", "info.json"), "rb") as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    version = info.get("codebase_version") if isinstance(info, dict) else None
    return version if isinstance(version, str) else None


def print_video_audit(audit: VideoAudit, out: Console, err: Console, limit: int = 20) -> None:
    """Print what ``verify_video`` checked, or its failures (the first ``limit``) on ``err``."""
    checked = (
        f"{audit.clips:,} episode videos in {audit.files:,} files, {audit.packets:,} packets, "
        f"{audit.frames_decoded:,} frames decoded"
    )
    if audit.ok:
        out.print(f"[green]OK[/green]: {checked} checked in {audit.root}")
        return
    err.print(f"[red]FAILED[/red]: {len(audit.failures):,} problem(s) in {audit.root} ({checked})")
    for failure in audit.failures[:limit]:
        err.print(f"  {failure}", markup=False)
    if len(audit.failures) > limit:
        err.print(f"  ... {len(audit.failures) - limit:,} more")

"""An attempt's check of the asset references it wrote, made when the attempt closes.

While an attempt writes, :class:`ReferenceRecorder` keeps the ``(row, column, path,
offset, size, checksum)`` of every reference in the blocks it hands to the data file
(a few numbers per reference, taken with Arrow compute, no row objects). On close,
:meth:`ReferenceRecorder.verify` checks them against storage:

- the sizes of the blocks and copied files come from one listing of the attempt's asset
  folder (one ``find``, paginated by the store), a ``stat`` only for a path it did not
  list; no byte of media is read for these checks;
- a blob reference must lie inside its block (``offset + size <= block size``), a copied
  file must exist with the size the writer copied;
- checksums (when the column carries them) are read back and verified for a seeded
  sample of at most :data:`CHECKSUMS_PER_ATTEMPT` in-bounds references, so the
  added reads stay small whatever the attempt's size.

The result, a :class:`~refiner_core.manifests.audit.ReferenceAudit`, goes into the
attempt's manifest.

Example:
    >>> import os, tempfile, pyarrow as pa, refiner_core as mdr
    >>> from refiner_core.io import DataFolder
    >>> out = tempfile.mkdtemp()
    >>> os.makedirs(f"{out}/assets/a")
    >>> _ = open(f"{out}/assets/a/block-00000.bin", "wb").write(b"abcdef")
    >>> block = f"{out}/assets/a/block-00000.bin"
    >>> cells = [{"path": block, "offset": 0, "size": 4}, {"path": block, "offset": 4, "size": 9}]
    >>> field = mdr.datatype.to_field("image", mdr.datatype.blob_reference("image"))
    >>> recorder = ReferenceRecorder("00000", "0123456789ab")
    >>> recorder.note(pa.table([pa.array(cells, field.type)], schema=pa.schema([field])), 0)
    >>> audit = recorder.verify(DataFolder(out), listed=["assets/a"])
    >>> audit.checked, audit.failure_count, audit.failures[0].row
    (2, 1, 1)
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..datatype import asset_of
from ..io.blob_batch import iter_blobs
from ..io.checksum import CHECKSUM_ALGORITHMS, checksum_of
from ..io.datafile import DataFolder, resolve
from ..manifests.audit import SHOWN_FAILURES, ReferenceAudit, ReferenceFailure

# In-bounds references per attempt whose checksum is read back and verified.
CHECKSUMS_PER_ATTEMPT = 16
# Threads that stat paths the listing did not show.
_STAT_THREADS = 8

_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("column", pa.string()),
        ("path", pa.string()),
        ("offset", pa.int64()),
        ("size", pa.int64()),
        ("checksum", pa.string()),
    ]
)


class ReferenceRecorder:
    """Collects the references one attempt (``shard``, ``attempt``) writes; see the module doc."""

    def __init__(self, shard: str, attempt: str) -> None:
        self.shard = shard
        self.attempt = attempt
        self._chunks: list[pa.Table] = []

    def note(self, table: pa.Table, first_row: int) -> None:
        """Record the references in the blob and path columns of ``table``, whose first
        row is row ``first_row`` of the attempt's output."""
        for index, field in enumerate(table.schema):
            info = asset_of(field)
            if info is None or info.form not in ("blob", "path"):
                continue
            values = table.column(index).combine_chunks()
            if info.is_list:
                rows = pc.list_parent_indices(values)
                values = pc.list_flatten(values)
            else:
                rows = pa.array(range(len(values)), pa.int64())
            present = pc.is_valid(values)
            values, rows = values.filter(present), rows.filter(present)
            self._chunks.append(_references(field.name, values, rows, first_row, info.form))

    def verify(
        self,
        folder: DataFolder,
        *,
        listed: Iterable[str] = (),
        copied_sizes: Mapping[str, int] | None = None,
    ) -> ReferenceAudit:
        """Check every recorded reference against storage under ``folder``.

        ``listed`` are the asset folders (relative to ``folder``) to list for sizes;
        ``copied_sizes`` maps a copied file's URL to the bytes the writer copied."""
        if not self._chunks:
            return ReferenceAudit(attempts=1)
        refs = pa.concat_tables(self._chunks)
        unique = pc.unique(refs["path"])
        paths: list[str] = unique.to_pylist()
        sizes = _sizes(folder, paths, listed)
        position = pc.index_in(refs["path"], value_set=unique)
        stored = pa.array([sizes[p] for p in paths], pa.int64()).take(position)
        known = copied_sizes or {}
        copied = pa.array([known.get(p) for p in paths], pa.int64()).take(position)
        missing = pc.is_null(stored)
        end = pc.add(refs["offset"], refs["size"])
        beyond = pc.fill_null(pc.greater(end, stored), False)
        resized = pc.fill_null(pc.and_(pc.is_null(end), pc.not_equal(copied, stored)), False)
        bad = pc.or_(pc.or_(missing, beyond), resized)
        failure_count = pc.sum(pc.cast(bad, pa.int64())).as_py() or 0
        shown = (
            refs.append_column("stored", stored)
            .append_column("copied", copied)
            .filter(bad)
            .slice(0, SHOWN_FAILURES)
        )
        failures = [_failure(self.shard, ref) for ref in shown.to_pylist()]
        good = pc.and_(pc.invert(bad), pc.is_valid(refs["checksum"]))
        sums = self._verify_checksums(refs.filter(good), folder)
        failure_count += len(sums[1])
        failures.extend(sums[1][: SHOWN_FAILURES - len(failures)])
        return ReferenceAudit(
            checked=refs.num_rows,
            failure_count=failure_count,
            checksums_verified=sums[0],
            failures=tuple(failures),
            attempts=1,
        )

    def _verify_checksums(
        self, carrying: pa.Table, folder: DataFolder
    ) -> tuple[int, list[ReferenceFailure]]:
        """Read back a seeded sample of ``carrying`` and compare checksums."""
        if carrying.num_rows == 0:
            return 0, []
        rng = random.Random(f"{self.shard}__{self.attempt}")
        count = min(CHECKSUMS_PER_ATTEMPT, carrying.num_rows)
        chosen = carrying.take(sorted(rng.sample(range(carrying.num_rows), count))).to_pylist()
        failures = []
        blobs = iter_blobs(chosen, storage_options=folder.storage_options or None)
        for ref, data in zip(chosen, blobs, strict=True):
            algorithm, _, expected = str(ref["checksum"]).partition(":")
            if algorithm not in CHECKSUM_ALGORITHMS:
                problem = f"cannot check checksum {ref['checksum']!r}: unknown algorithm"
                failures.append(_failure(self.shard, ref, problem))
                continue
            actual = checksum_of(data or b"", algorithm).partition(":")[2]
            if actual != expected.lower():
                problem = f"its {algorithm} is {actual}, the reference says {expected}"
                failures.append(_failure(self.shard, ref, problem))
        return count, failures


def _references(column: str, values: Any, rows: Any, first_row: int, form: str) -> pa.Table:
    """The recorder's table of one column's (non-null) references."""
    count = len(values)
    nulls = pa.nulls(count, pa.int64())
    if form == "blob":
        names = {values.type.field(i).name for i in range(values.type.num_fields)}
        path = pc.struct_field(values, "path")
        offset = pc.cast(pc.struct_field(values, "offset"), pa.int64())
        size = pc.cast(pc.struct_field(values, "size"), pa.int64())
        checksum = (
            pc.cast(pc.struct_field(values, "checksum"), pa.string())
            if "checksum" in names
            else pa.nulls(count, pa.string())
        )
    else:
        path, offset, size, checksum = values, nulls, nulls, pa.nulls(count, pa.string())
    return pa.Table.from_arrays(
        [
            pc.add(pc.cast(rows, pa.int64()), first_row),
            pa.array([column] * count, pa.string()),
            pc.cast(path, pa.string()),
            offset,
            size,
            checksum,
        ],
        schema=_SCHEMA,
    )


def _failure(shard: str, ref: dict[str, Any], problem: str | None = None) -> ReferenceFailure:
    """The failure of one recorded reference; without ``problem``, ``ref`` carries its
    path's ``stored`` size (``None``: absent) and, for a copied file, the ``copied`` size."""
    if problem is None:
        offset, size, stored = ref["offset"], ref["size"], ref["stored"]
        kind = "file" if offset is None else "block"
        if stored is None:
            problem = f"the {kind} does not exist"
        elif offset is None:
            problem = f"the file has {stored} bytes, not the {ref['copied']} bytes copied"
        else:
            problem = (
                f"range [{offset}, {offset + size}) reaches past the end of the block, which "
                f"has {stored} bytes"
            )
    return ReferenceFailure(
        shard=shard, row=ref["row"], column=ref["column"], path=ref["path"], problem=problem
    )


def _sizes(folder: DataFolder, urls: list[str], listed: Iterable[str]) -> dict[str, int | None]:
    """The size of every URL in ``urls`` (``None``: absent): one listing per folder in
    ``listed``, then a stat, in threads, of each URL the listings did not show."""
    from fsspec.core import strip_protocol  # loaded where outputs are written

    fs = folder.fs
    found: dict[str, int] = {}
    for relative in listed:
        base = folder.join(relative)
        fs.invalidate_cache(base)
        try:
            entries = fs.find(base, detail=True)
        except FileNotFoundError:
            continue
        found.update({key: int(info["size"]) for key, info in entries.items()})
    keys = {url: strip_protocol(url) for url in urls}
    sizes: dict[str, int | None] = {url: found.get(key) for url, key in keys.items()}
    unseen = [url for url, size in sizes.items() if size is None]
    if unseen:
        with ThreadPoolExecutor(min(_STAT_THREADS, len(unseen))) as pool:
            for url, size in zip(unseen, pool.map(lambda u: _stat(folder, u), unseen), strict=True):
                sizes[url] = size
    return sizes


def _stat(folder: DataFolder, url: str) -> int | None:
    fs, path = resolve(url, folder.storage_options if "://" in url else None)
    try:
        return int(fs.size(path))
    except FileNotFoundError:
        return None

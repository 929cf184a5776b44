"""``BlobAssetConfig``: pack assets into worker-owned blocks; cells become blob references."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pyarrow as pa

from ...datatype import with_asset_form
from ...io.checksum import carried_checksum
from ...io.datafile import resolve
from .base import AssetWriterBase
from .blob_column import ColumnPacker
from .blocks import BlockWriter
from .coalesce import coalescing_candidates
from .columns import AssetColumn, asset_columns
from .dedupe import (
    FAST_DIGEST,
    DedupeIndex,
    DigestPlan,
    Fetched,
    content_digest,
)
from .digest_index import EarlierDigests, write_digest_index
from .fetch import (
    INLINE_LIMIT,
    MissingAsset,
    Source,
    open_local,
    source_size,
)
from .sources import is_url

DEFER_MAX_ROWS = 262_144


class BlobAssetWriter(AssetWriterBase):
    """Appends each asset to the open block of its column (one per attempt and column).

    With ``missing_policy="error"``, blob-reference columns are held (references
    only, never media bytes) until the shard ends or ``DEFER_MAX_ROWS`` rows, so
    that source blobs covered entirely by their references are copied once.
    """

    output_form = "blob"

    def __init__(self, config: Any, folder: Any, attempt: str) -> None:
        super().__init__(config, folder, attempt)
        self.blocks: dict[str, BlockWriter] = {}
        self._lock = asyncio.Lock()
        self._held: list[pa.Table] = []
        self._held_from: tuple[str, int] = ("", 0)  # shard and first row of the held rows
        earlier = (
            EarlierDigests(config.dedupe_against, folder.storage_options)
            if config.dedupe_against
            else None
        )
        self.dedupe = DedupeIndex(config.dedupe, self.counters, earlier)
        self.sources_seen: set[Any] = set()  # dedupe="source": repeats only look up their key
        self.digests = DigestPlan(
            content=self._content_digest(earlier) if config.dedupe == "content" else None,
            checksum=config.checksum,
        )

    def _content_digest(self, earlier: EarlierDigests | None) -> str:
        """The digest content dedupe keys on: the earlier outputs' own, if there are any."""
        if earlier is None:
            return content_digest(self.local_output)
        if earlier.algorithm == FAST_DIGEST and not self.local_output:
            raise ValueError(
                f"dedupe_against: {earlier.folders[0].url} keys its assets on {FAST_DIGEST} "
                f"(it was written to a local disk), which an output on {self.folder.url} cannot "
                "confirm by reading its own blocks back; write this output to a local disk too, "
                "or leave that folder out of dedupe_against"
            )
        return earlier.algorithm

    def _block(self, column: AssetColumn) -> BlockWriter:
        writer = self.blocks.get(column.name)
        if writer is None:
            directory = f"{self.attempt_dir}/{column.dirname}"
            writer = BlockWriter(self.folder, directory, self.config.target_bytes, self.counters)
            self.blocks[column.name] = writer
        return writer

    def _coalesces(self, column: AssetColumn) -> bool:
        """Whether whole source blobs of ``column`` may be copied once (SPEC: scalar
        blob references under the ``error`` policy)."""
        return (
            self.config.missing_policy == "error"
            and column.info.form == "blob"
            and not column.info.is_list
        )

    async def process(self, table: pa.Table, *, shard_id: str, first_row: int) -> list[pa.Table]:
        async with self._lock:
            if not any(self._coalesces(c) for c in asset_columns(table.schema)):
                return [await self.process_table(table, shard_id=shard_id, first_row=first_row)]
            if not self._held:
                self._held_from = (shard_id, first_row)
            self._held.append(table)
            if sum(t.num_rows for t in self._held) < DEFER_MAX_ROWS:
                return []
            return await self._release()

    async def flush(self) -> list[pa.Table]:
        async with self._lock:
            return await self._release()

    async def _release(self) -> list[pa.Table]:
        if not self._held:
            return []
        tables, (shard_id, first_row) = self._held, self._held_from
        self._held = []
        combined = (
            pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        )
        return [await self.process_table(combined, shard_id=shard_id, first_row=first_row)]

    async def _write_column(
        self,
        column: AssetColumn,
        values: list[Any],
        dropped: list[bool],
        written: dict[int, list[tuple[str, int]]],
        *,
        shard_id: str,
        first_row: int,
    ) -> list[Any]:
        """The column's blob references, its assets appended to the column's block."""
        block = self._block(column)
        if self.local_output and column.info.form == "path" and self.dedupe.mode is None:
            local = list(self.jobs(column, values, dropped))
            if all(isinstance(v, str) and v and not is_url(v) for _, _, v in local):
                results: list[Any] = list(values)
                await self._pack_local_files(
                    block, column, values, local, results, first_row=first_row, shard_id=shard_id
                )
                return results
        whole: dict[str, int] = {}
        if self._coalesces(column):
            whole = self._carrying_checksums(await self._whole_blobs(values), values)
        packer = ColumnPacker(
            self, column, block, values, dropped, whole, shard_id=shard_id, first_row=first_row
        )
        return await packer.run()

    async def _pack_local_files(
        self,
        block: BlockWriter,
        column: AssetColumn,
        values: list[Any],
        jobs: list[tuple[int, int | None, Any]],
        results: list[Any],
        *,
        first_row: int,
        shard_id: str,
    ) -> None:
        """Pack a column of local file paths into ``block`` in row order, each file with
        one ``stat`` (the source policy's), one ``open`` and a kernel copy, or, with
        ``checksum=``, a read that the checksum sees on its way into the block.

        What the general loop does for such a column (no dedupe, local output), without
        its prefetch window, which only pays for remote reads. Packing many small files
        is bound by this loop's system calls, so it does little else per file."""
        check = self.filesystems.policy.check_local_file
        hashed = self.digests.checksum is not None
        written = written_bytes = 0
        try:
            for row, element, value in jobs:
                try:
                    path, size = check(value)
                    opened = open_local(None, path, size, value, keep_open=True)
                except MissingAsset:
                    new = self.on_missing(column, first_row + row, element, value, shard_id)
                    self.place(results, column, values, row, element, new)
                    continue
                except Exception as exc:
                    raise self.fail(column, first_row + row, element, value, exc, shard_id) from exc
                try:
                    digests = self.digests.streaming(value) if hashed else None
                    source = digests.tee(opened) if digests is not None else opened
                    if opened.size <= INLINE_LIMIT:
                        url, start = block.append(source)
                    else:
                        url, start = await self.in_thread(block.append, source)
                except Exception as exc:
                    raise self.fail(column, first_row + row, element, value, exc, shard_id) from exc
                finally:
                    opened.close()
                written += 1
                written_bytes += opened.size
                reference = {"path": url, "offset": start, "size": opened.size}
                if digests is not None:
                    reference["checksum"] = digests.reference_checksum()
                if element is None:
                    results[row] = reference
                else:
                    self.place(results, column, values, row, element, reference)
        finally:
            self.counters["assets_written"] += written
            self.counters["asset_bytes"] += written_bytes

    async def store(self, block: BlockWriter, fetched: Fetched, value: Any, form: str) -> dict:
        """Append one fetched asset to ``block`` (or reuse its earlier copy); its reference."""
        source, size = fetched.source, fetched.size
        assert source is not None  # only a key-only lookup has no source, and it is reused
        self.counters["assets_written"] += 1
        reused = self.dedupe.reuse(fetched.key, size, self._confirmer(source))
        if reused is not None:
            return reused
        if source.data is not None or source.fd is not None and size <= INLINE_LIMIT:
            url, start = block.append(source)
            reference = self.reference(url, start, size, fetched.checksum)
        else:
            digests = self.digests.streaming(value)
            if digests.content is not None and self.dedupe.has_size(size):
                # a large asset the size of one already stored: hash it first, so that a
                # repeat is never written (one read), and a new one is read twice
                await self.in_thread(_drain, digests.tee(source))
                reused = self.dedupe.reuse(digests.key(size), size, self._confirmer(source))
                if reused is not None:
                    return reused
                digests = self.digests.streaming(value)
            url, start = await self.in_thread(block.append, digests.tee(source))
            fetched.key = digests.key(size) or fetched.key
            reference = self.reference(url, start, size, digests.reference_checksum())
        self.dedupe.remember(fetched.key, reference, size)
        self.counters["asset_bytes"] += size
        if form == "blob":
            self.counters["ranges_copied"] += 1
            self.counters["bytes_range_copied"] += size
        return reference

    def _confirmer(self, source: Source) -> Any:
        """For a fast content digest: a check that a stored copy holds ``source``'s bytes."""
        if self.digests.content != FAST_DIGEST:
            return None
        return functools.partial(self._stored_holds, source)

    def _stored_holds(self, source: Source, stored: dict) -> bool:
        """Whether the stored range ``stored`` (in a local block, open or closed, or a
        block of an earlier output) has exactly the bytes of ``source``."""
        path = stored["path"]
        for block in self.blocks.values():
            path = block.readable_path(path)
        if "://" in path:  # a block of an earlier output on another store
            fs, fs_path = resolve(path, self.folder.storage_options)
            opened = fs.open(fs_path, "rb")
        else:
            opened = open(path, "rb")  # noqa: SIM115 (closed by the with below)
        with opened as f:
            f.seek(stored["offset"])
            for chunk in source.chunks():
                if f.read(len(chunk)) != chunk:
                    return False
        return True

    def reference(self, url: str, offset: int, size: int, checksum: str | None) -> dict:
        reference = {"path": url, "offset": offset, "size": size}
        if self.config.checksum is not None:
            reference["checksum"] = checksum
        return reference

    def _carrying_checksums(self, whole: dict[str, int], values: list[Any]) -> dict[str, int]:
        """With ``checksum=``, only blobs whose every reference carries a checksum of that
        algorithm are copied whole (it is carried over; the others are hashed by range)."""
        if self.config.checksum is None or not whole:
            return whole
        lacking = {
            value["path"]
            for value in values
            if value is not None and carried_checksum(value, self.config.checksum) is None
        }
        return {path: size for path, size in whole.items() if path not in lacking}

    def output_field(self, column: AssetColumn) -> pa.Field:
        return with_asset_form(column.field, "blob", checksum=self.config.checksum is not None)

    async def _whole_blobs(self, values: list[Any]) -> dict[str, int]:
        """Source blobs (→ size) covered entirely by the references in ``values``; the
        candidates are sized concurrently (a HEAD each on object stores)."""
        candidates = coalescing_candidates(values)

        def covered(path: str) -> bool:
            try:
                return source_size(path, self.filesystems) == candidates[path]
            except Exception:  # missing or unreadable: the per-range path reports it
                return False

        found = await asyncio.gather(*(self.in_thread(covered, path) for path in candidates))
        return {path: candidates[path] for path, ok in zip(candidates, found, strict=True) if ok}

    async def copy_whole(
        self, block: BlockWriter, path: str, size: int, copies: list, fail: Any
    ) -> tuple[str, int]:
        """Copy a fully referenced source blob once; returns ``(block url, offset)``.

        A large blob on the output's filesystem is copied server-side into a block of
        its own: the copy starts now and joins ``copies``, which the caller awaits
        before its rows are written. Anything else is appended to the open block.
        ``fail(exc)`` builds the error that names the first reference."""
        fs, fs_path = self.filesystems.resolve(path)
        relative = block.whole_copy_destination(fs, size)
        if relative is not None:
            copies.append(asyncio.ensure_future(self._settle(fs, fs_path, relative, fail)))
            placed = (self.folder.url_of(relative), 0)
        else:
            try:
                placed = await self.in_thread(
                    block.append, Source(size=size, fs=fs, path=fs_path, url=path)
                )
            except Exception as exc:
                raise fail(exc) from exc
        self.counters["blobs_coalesced"] += 1
        self.counters["bytes_coalesced"] += size
        self.counters["asset_bytes"] += size
        return placed

    async def _settle(self, fs: Any, path: str, relative: str, fail: Any) -> None:
        try:
            await self.in_thread(self.folder.copy_from, fs, path, relative)
        except Exception as exc:
            raise fail(exc) from exc

    async def close(self) -> dict[str, Any]:
        for block in self.blocks.values():
            block.close()
        self._shutdown()
        if self.digests.content is not None:
            write_digest_index(
                self.folder, self.attempt, self.digests.content, self.dedupe.stored()
            )
        return self.result()

    async def abort(self) -> None:
        for block in self.blocks.values():
            block.abort()
        self._shutdown()
        self.discard()


def _drain(source: Any) -> None:
    for _ in source.chunks():
        pass

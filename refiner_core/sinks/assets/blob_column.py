"""One column of one table packed into its block, through a window of prefetched reads.

:class:`ColumnPacker` is the general path of ``BlobAssetWriter``: every value (a path,
bytes, a blob reference; remote or local; deduplicated or not) is fetched ahead in a
window of ``max_in_flight``, remote ones in threads, and stored in row order, so the
block's layout and the errors follow the rows. Source blobs that the column's
references cover whole are copied once instead (``whole``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .blocks import BlockWriter
from .columns import AssetColumn
from .dedupe import Fetched, source_key, source_key_size
from .fetch import MissingAsset, Source, is_remote, open_source

if TYPE_CHECKING:
    from .blob_writer import BlobAssetWriter

# A fetched value or the error fetching it raised (reported in row order).
Outcome = tuple[Fetched | None, Exception | None]
# (row, element, value, what fetches it): None for a value inside a blob copied whole,
# a finished outcome for a local read, a future for a remote one.
Pending = tuple[int, int | None, Any, "Outcome | asyncio.Future[Outcome] | None"]


class ColumnPacker:
    """Packs ``values`` (one column of one table) for ``writer`` into ``results``."""

    def __init__(
        self,
        writer: BlobAssetWriter,
        column: AssetColumn,
        block: BlockWriter,
        values: list[Any],
        dropped: list[bool],
        whole: dict[str, int],
        *,
        shard_id: str,
        first_row: int,
    ) -> None:
        self.writer = writer
        self.column = column
        self.block = block
        self.values = values
        self.results: list[Any] = list(values)
        self.whole = whole
        self.shard_id = shard_id
        self.first_row = first_row
        self.form = column.info.form
        self.by_source = writer.dedupe.mode == "source"
        # local files into local blocks are copied by the kernel unless a digest needs the bytes
        self.keep_open = writer.local_output and writer.digests.needs_nothing
        self._jobs: Iterator[tuple[int, int | None, Any]] = iter(
            writer.jobs(column, values, dropped)
        )
        self._window: collections.deque[Pending] = collections.deque()
        self._copied: dict[str, tuple[str, int]] = {}  # source blob -> (block url, offset)
        self._copies: list[asyncio.Future[None]] = []  # server-side whole-blob copies

    async def run(self) -> list[Any]:
        """The column's new cells: blob references, or what the missing policy put."""
        try:
            self._schedule()
            while self._window:
                row, element, value, pending = self._window.popleft()
                if pending is None:
                    await self._place_whole(row, element, value)
                else:
                    await self._place_fetched(row, element, value, pending)
                self._schedule()
        finally:
            outcomes = await self._settle()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return self.results

    # fetching ------------------------------------------------------------------
    def _fetch(self, value: Any, key_only: bool = False) -> Outcome:
        writer = self.writer
        try:
            key = source_key(value, self.form, writer.filesystems) if self.by_source else None
            if key_only and key is not None:
                return Fetched(None, key), None
            source = open_source(value, self.form, writer.filesystems, keep_open=self.keep_open)
            if source.data is None:
                return Fetched(source, key), None
            return writer.digests.of_bytes(source, value, key), None
        except Exception as exc:  # reported in row order
            return None, exc

    async def _fetch_async(self, value: Any, key_only: bool = False) -> Outcome:
        outcome: Outcome = await self.writer.in_thread(self._fetch, value, key_only)
        return outcome

    def _schedule(self) -> None:
        """Start fetching the next values until the window holds ``max_in_flight``."""
        scheduled = self.writer.sources_seen
        for row, element, value in self._jobs:
            # coalescing_candidates validated every reference of the column already
            source_id = source_identity(value) if self.by_source else None
            key_only = source_id is not None and source_id in scheduled
            if source_id is not None:
                scheduled.add(source_id)
            pending: Outcome | asyncio.Future[Outcome] | None
            if self.whole and value["path"] in self.whole:
                pending = None
            elif not is_remote(value, self.form):
                pending = self._fetch(value, key_only)
            else:
                pending = asyncio.ensure_future(self._fetch_async(value, key_only))
            self._window.append((row, element, value, pending))
            if len(self._window) >= self.writer.config.max_in_flight:
                return

    # storing -------------------------------------------------------------------
    def _place(self, row: int, element: int | None, cell: Any) -> None:
        self.writer.place(self.results, self.column, self.values, row, element, cell)

    def _error(self, row: int, element: int | None, value: Any, exc: Exception) -> Exception:
        return self.writer.fail(
            self.column, self.first_row + row, element, value, exc, self.shard_id
        )

    async def _place_whole(self, row: int, element: int | None, value: Any) -> None:
        """A reference into a source blob copied whole: copied once, then re-pointed."""
        path = value["path"]
        writer = self.writer
        if path not in self._copied:
            fail = functools.partial(self._error, row, element, value)
            self._copied[path] = await writer.copy_whole(
                self.block, path, self.whole[path], self._copies, fail
            )
        url, start = self._copied[path]
        writer.counters["references_coalesced"] += 1
        writer.counters["assets_written"] += 1
        reference = writer.reference(
            url, start + value["offset"], value["size"], value.get("checksum")
        )
        self._place(row, element, reference)

    async def _place_fetched(
        self,
        row: int,
        element: int | None,
        value: Any,
        pending: Outcome | asyncio.Future[Outcome],
    ) -> None:
        writer = self.writer
        fetched, error = await pending if isinstance(pending, asyncio.Future) else pending
        if error is None and fetched is not None and fetched.source is None:
            assert isinstance(fetched.key, tuple)  # a key-only lookup holds a source key
            reused = writer.dedupe.reuse(fetched.key, source_key_size(fetched.key))
            if reused is not None:
                writer.counters["assets_written"] += 1
                self._place(row, element, reused)
                return
            # the first copy of this source failed or it changed: read it now
            fetched, error = await writer.in_thread(self._fetch, value)
        if error is not None:
            if not isinstance(error, MissingAsset):
                raise self._error(row, element, value, error)
            new = writer.on_missing(
                self.column, self.first_row + row, element, error.path, self.shard_id
            )
            self._place(row, element, new)
            return
        assert fetched is not None  # an outcome holds a value or an error
        try:
            reference = await writer.store(self.block, fetched, value, self.form)
        except Exception as exc:  # a streamed source failing half way
            raise self._error(row, element, value, exc) from exc
        finally:
            release(fetched)
        self._place(row, element, reference)

    async def _settle(self) -> list[Any]:
        """Cancel or release what the window still holds, then let every started copy
        settle, so no block lands after its attempt's cleanup; their outcomes."""
        for _, _, _, pending in self._window:
            if isinstance(pending, asyncio.Future):
                pending.cancel()
            elif pending is not None:
                release(pending[0])
        return await asyncio.gather(*self._copies, return_exceptions=True)


def release(fetched: Fetched | None) -> None:
    """Close the local file a fetched asset holds open, if it holds one."""
    source = fetched.source if fetched is not None else None
    if isinstance(source, Source):
        source.close()


def source_identity(value: Any) -> Any:
    """What makes two values the same source before any lookup: the path, or a blob
    reference's path and range; ``None`` for values that are neither."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = (value.get("path"), value.get("offset"), value.get("size"))
        if all(isinstance(p, (str, int)) for p in parts):
            return parts
    return None

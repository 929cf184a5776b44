"""Block files: append-only packs of asset bytes with the rollover rule of BlobAssetConfig."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ...io.kernel_copy import copy_range
from .fetch import Source

if TYPE_CHECKING:
    from .dedupe import HashedSource

WHOLE_COPY_MIN_BYTES = 8 * 1024 * 1024


class BlockWriter:
    """Packs one column's assets into ``<dir>/block-00000.bin``, ``block-00001.bin`` …

    A block rolls over when it is non-empty and the next asset would take it past
    ``target_bytes``; an asset larger than the target gets a block of its own. Each
    block is opened with its largest possible final size as the upload size hint and
    becomes visible only when it is closed whole.
    """

    def __init__(
        self, folder: Any, directory: str, target_bytes: int, counters: dict[str, int]
    ) -> None:
        self.folder = folder
        self.directory = directory
        self.target = target_bytes
        self.counters = counters
        self.index = 0
        self._stack: contextlib.ExitStack | None = None
        self._file: Any = None
        self._url = ""
        self._offset = 0
        self._fd: int | None = None  # the open block's descriptor, when it is a local file
        self._behind = False  # kernel copies wrote past the file object's position

    def _next_relative(self) -> str:
        relative = f"{self.directory}/block-{self.index:05d}.bin"
        self.index += 1
        return relative

    def _close_current(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self.counters["blocks_written"] += 1
            self.counters["block_bytes"] += self._offset
            self._stack = None
            self._file = None
            self._fd = None

    def _room_for(self, size: int) -> None:
        if self._stack is not None and self._offset > 0 and self._offset + size > self.target:
            self._close_current()
        if self._stack is None:
            relative = self._next_relative()
            self._stack = contextlib.ExitStack()
            self._file = self._stack.enter_context(
                self.folder.open_atomic(relative, size_hint=max(self.target, size))
            )
            self._url = self.folder.url_of(relative)
            self._offset = 0
            self._fd = _descriptor(self._file)
            self._behind = False

    def append(self, source: Source | HashedSource) -> tuple[str, int]:
        """Append one asset; returns ``(block url, offset)``."""
        self._room_for(source.size)
        start = self._offset
        if isinstance(source, Source) and source.fd is not None and self._fd is not None:
            if not self._behind:
                self._file.flush()  # the kernel copy lands after the bytes written so far
            try:
                copy_range(source.fd, source.offset, self._fd, start, source.size)
            except EOFError as exc:
                raise EOFError(
                    f"asset {source.url} ended early while it was packed: {exc}"
                ) from exc
            self._behind = True
            self._offset += source.size
            return self._url, start
        if self._behind:  # the file object still stands where its last own write ended
            self._file.seek(start)
            self._behind = False
        written = 0
        for chunk in source.chunks():
            self._file.write(chunk)
            written += len(chunk)
        if written != source.size:
            raise EOFError(
                f"asset {source.url or '<bytes>'} gave {written} bytes, expected {source.size}"
            )
        self._offset += written
        return self._url, start

    def readable_path(self, url: str) -> str:
        """Where the bytes of block ``url`` can be read now: the open block's temporary
        file (flushed) when ``url`` is the open block of a local output, else ``url``."""
        if self._file is not None and url == self._url and hasattr(self._file, "name"):
            self._file.flush()
            return self._file.name
        return url

    def whole_copy_destination(self, fs: Any, size: int) -> str | None:
        """Where a whole source blob of ``size`` bytes on ``fs`` is copied server-side,
        as a block of its own (its name taken now, in row order); ``None`` when it is
        small, or not on this output's filesystem, and should be appended instead."""
        fits = self._stack is not None and self._offset > 0 and self._offset + size <= self.target
        if (
            fits
            or not self.folder.same_filesystem(fs)
            or size < min(self.target, WHOLE_COPY_MIN_BYTES)
        ):
            return None
        self.counters["blocks_written"] += 1
        self.counters["block_bytes"] += size
        return self._next_relative()

    def close(self) -> None:
        self._close_current()

    def abort(self) -> None:
        if self._stack is not None:
            error = RuntimeError("block aborted")
            with contextlib.suppress(Exception):
                self._stack.__exit__(type(error), error, None)
            self._stack = None


def _descriptor(file: Any) -> int | None:
    """``file``'s descriptor when it is a local file (a kernel copy can fill it)."""
    try:
        return file.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None

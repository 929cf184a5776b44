"""Plans of an exact number of shards over JSON Lines files: byte ranges cut at lines.

The files are seen as one stream of bytes, in order. The stream is cut at even byte
offsets, and each cut is moved forward to the start of the next line (a small read
at each cut: the files are never read whole). A cut that lands on or before the
previous one moves to the line after it, so a plan has exactly ``min(count, lines)``
shards, each starting at a line of its own; a shard owns the lines that start in its
byte ranges, exactly as :meth:`JsonlSource.read` reads them.
"""

from __future__ import annotations

import bisect
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..io.datafile import is_local
from ..io.ranged import open_range

REMOTE_READS_IN_FLIGHT = 16


@dataclass(frozen=True)
class LineFile:
    """One input file: its filesystem, path, full URL and size in bytes."""

    fs: Any
    path: str
    url: str
    size: int


def _next_line_start(file: LineFile, offset: int) -> int:
    """The first offset at or after ``offset`` where a line starts (``file.size`` if
    none does)."""
    if offset <= 0:
        return 0
    if offset >= file.size:
        return file.size
    with open_range(file.fs, file.path, offset - 1, offset) as f:
        line = f.readline()
    return min(file.size, offset - 1 + len(line))


class _Stream:
    """The files as one run of bytes: global offsets to ``(file, offset)`` and back."""

    def __init__(self, files: list[LineFile]) -> None:
        self.files = [f for f in files if f.size > 0]
        self.starts = [0]
        for f in self.files:
            self.starts.append(self.starts[-1] + f.size)
        self.size = self.starts[-1]

    def line_start_from(self, position: int) -> int:
        """The first global offset at or after ``position`` where a line starts."""
        if position >= self.size:
            return self.size
        j = bisect.bisect_right(self.starts, position) - 1
        local = _next_line_start(self.files[j], position - self.starts[j])
        return self.starts[j] + local  # at a file's end this is the next file's start

    def ranges(self, start: int, stop: int) -> tuple[tuple[str, int, int], ...]:
        """``(url, start, end)`` byte ranges of the files covering ``[start, stop)``."""
        out = []
        for j, f in enumerate(self.files):
            lo, hi = max(start, self.starts[j]), min(stop, self.starts[j + 1])
            if lo < hi:
                out.append((f.url, lo - self.starts[j], hi - self.starts[j]))
        return tuple(out)


def line_range_payloads(
    files: list[LineFile], count: int
) -> list[tuple[tuple[str, int, int], ...]]:
    """Exactly ``min(count, lines)`` shard payloads of ``(url, start, end)`` byte ranges,
    each shard starting at a line start, covering every byte of ``files`` once.

    Example:
        >>> import fsspec
        >>> fs = fsspec.filesystem("memory")
        >>> fs.pipe_file("/lines.jsonl", b'{"a":1}\\n{"a":22}\\n{"a":3}\\n')
        >>> f = LineFile(fs, "/lines.jsonl", "memory://lines.jsonl", fs.size("/lines.jsonl"))
        >>> line_range_payloads([f], 2)  # the cut at byte 12 moves to the line at 17
        [(('memory://lines.jsonl', 0, 17),), (('memory://lines.jsonl', 17, 25),)]
        >>> len(line_range_payloads([f], 10))
        3
    """
    stream = _Stream(files)
    if stream.size == 0:
        return []
    offsets = [k * stream.size // count for k in range(1, count)]
    if all(is_local(f.fs) for f in stream.files):
        snapped = [stream.line_start_from(offset) for offset in offsets]
    else:  # one small ranged read per cut: many at once
        with ThreadPoolExecutor(max_workers=REMOTE_READS_IN_FLIGHT) as pool:
            snapped = list(pool.map(stream.line_start_from, offsets))
    bounds = [0]
    for cut in snapped:
        if cut <= bounds[-1]:
            cut = stream.line_start_from(bounds[-1] + 1)
        if cut >= stream.size:
            break  # fewer lines than shards wanted
        bounds.append(cut)
    bounds.append(stream.size)
    return [stream.ranges(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1)]

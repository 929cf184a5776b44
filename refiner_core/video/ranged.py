"""A remote video read in byte ranges: the few bytes the demuxer asks for, the index in
one request and a clip's packets in another.

Reading one episode from a shared MP4 on S3 needs three things: the box headers, the
index (``moov``) and the episode's packets. A block cache (s3fs's default) fetches a
whole block at every seek, most of it bytes nobody reads. :class:`RangedReader` instead
fetches, after a seek, only :data:`FIRST_READ_BYTES`, doubling while reads continue
sequentially (up to :data:`MAX_READAHEAD_BYTES`); and ranges announced with
:meth:`RangedReader.plan` are fetched in pieces of up to :data:`PLANNED_PIECE_BYTES`,
never past their end: the file's head and its ``moov`` box (found by
:func:`plan_index` from the top-level box headers) and the clip's packets (found in the
container's index by :func:`plan_clip`). Reads return short at those boundaries; the
demuxer asks again.
"""

from __future__ import annotations

import bisect
import struct
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .clip_ref import TIME_TOLERANCE_S

# The first fetch after a seek: enough for box headers, and small when that is all.
FIRST_READ_BYTES = 4 * 1024
# Reads that continue sequentially double their fetch up to this (an index, a whole file).
MAX_READAHEAD_BYTES = 256 * 1024
# A planned range (a clip's packets) is fetched in requests of at most this many bytes.
PLANNED_PIECE_BYTES = 8 * 1024 * 1024
# Fetched bytes kept for reads that come back (the index, a clip re-read after probing);
# older ones are dropped, so a file read whole (verify_video) holds no more than this.
KEEP_BYTES = 16 * 1024 * 1024
# The head of a file, fetched at once: the ``ftyp`` box and the start of the first packets,
# which opening the file decodes to learn the stream's format.
HEAD_BYTES = 64 * 1024
# Top-level boxes an MP4/MOV file starts with; any other start is not walked.
_FIRST_BOXES = {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot"}


@dataclass(frozen=True)
class _Segment:
    start: int
    data: bytes

    @property
    def end(self) -> int:
        return self.start + len(self.data)


class RangedReader:
    """A read-only, seekable file over ``fs`` that fetches byte ranges (see the module doc).

    Example:
        >>> import fsspec
        >>> fs = fsspec.filesystem("memory")
        >>> fs.pipe("/clip.bin", bytes(range(256)) * 64)
        >>> reader = RangedReader(fs, "/clip.bin", 256 * 64)
        >>> _ = reader.seek(300)
        >>> reader.read(3), reader.fetched
        (b',-.', 4096)
    """

    def __init__(self, fs: Any, path: str, size: int) -> None:
        self.fs, self.path, self.size = fs, path, size
        self.position = 0
        self.fetched = 0  # bytes requested from storage so far
        self.requests = 0
        self._segments: deque[_Segment] = deque()
        self._kept = 0
        self._plans: list[tuple[int, int]] = []
        self._sequential_end = -1  # where the last fetch ended
        self._ahead = FIRST_READ_BYTES

    def plan(self, start: int, end: int) -> None:
        """Announce that ``[start, end)`` will be read, so it is fetched in large pieces."""
        start, end = max(0, start), min(self.size, end)
        if end > start:
            self._plans.append((start, end))

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.position
        n = min(n, self.size - self.position)
        if n <= 0:
            return b""
        segment = self._segment_at(self.position) or self._fetch(self.position)
        offset = self.position - segment.start
        data = segment.data[offset : offset + n]
        self.position += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}.get(whence)
        if base is None:
            raise ValueError(f"seek of {self.path}: whence={whence!r} is not 0, 1 or 2")
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._segments.clear()
        self._kept = 0

    def _segment_at(self, position: int) -> _Segment | None:
        for segment in reversed(self._segments):  # the newest first: reads are mostly sequential
            if segment.start <= position < segment.end:
                return segment
        return None

    def _fetch(self, position: int) -> _Segment:
        planned = [end for start, end in self._plans if start <= position < end]
        if planned:
            end = min(max(planned), position + PLANNED_PIECE_BYTES)
        else:
            if position == self._sequential_end:
                self._ahead = min(2 * self._ahead, MAX_READAHEAD_BYTES)
            else:
                self._ahead = FIRST_READ_BYTES
            end = position + self._ahead
            for start, _ in self._plans:
                if position < start:
                    end = min(end, start)  # the plan's own fetch takes over there
        end = min(end, self.size)
        data = self.fs.cat_file(self.path, start=position, end=end)
        if len(data) != end - position:
            raise OSError(
                f"{self.path}: asked for bytes {position:,}-{end:,} and got {len(data):,} bytes; "
                "the file changed while it was read"
            )
        self.fetched += len(data)
        self.requests += 1
        self._sequential_end = end
        segment = _Segment(position, data)
        self._segments.append(segment)
        self._kept += len(data)
        while self._kept > KEEP_BYTES and len(self._segments) > 1:
            self._kept -= len(self._segments.popleft().data)
        return segment


def _read_exactly(reader: RangedReader, at: int, n: int) -> bytes:
    reader.seek(at)
    parts = []
    while n > 0 and (part := reader.read(n)):
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def plan_index(reader: RangedReader) -> None:
    """Plan the file's head and, when it is an MP4/MOV file, its ``moov`` box (the index
    the demuxer reads whole on opening), walking the top-level box headers: a request for
    the head and, when the index lies further on, one for its header and one for the rest."""
    reader.plan(0, HEAD_BYTES)
    at = 0
    while at + 8 <= reader.size:
        header = _read_exactly(reader, at, 16)
        if len(header) < 8:
            break
        length, kind = struct.unpack(">I4s", header[:8])
        if at == 0 and kind not in _FIRST_BOXES:
            break  # not an MP4/MOV file: nothing more to plan
        if length == 1 and len(header) == 16:
            length = struct.unpack(">Q", header[8:16])[0]
        elif length == 0:
            length = reader.size - at
        if length < 8:
            break
        if kind == b"moov":
            reader.plan(at, at + length)
            break
        at += length
    reader.seek(0)


def plan_clip(reader: RangedReader, stream: Any, start_s: float, stop_s: float) -> None:
    """Plan on ``reader`` the bytes that demuxing ``stream`` over ``[start_s, stop_s)`` from
    the keyframe before ``start_s`` reads, found in the stream's index: from that keyframe's
    packet to the first packet decoded at or after ``stop_s`` (demuxing stops on it).
    Without an index nothing is planned and reads stay small."""
    entries = stream.index_entries
    if not len(entries):
        return
    time_base = stream.time_base

    def ticks(seconds: float) -> int:
        return int(Fraction(seconds).limit_denominator(1_000_000) / time_base)

    def timestamp(entry: Any) -> int:
        return int(entry.timestamp)

    first = bisect.bisect_right(entries, ticks(start_s), key=timestamp) - 1
    while first > 0 and not entries[first].is_keyframe:
        first -= 1
    first = max(first, 0)
    stop = ticks(stop_s - TIME_TOLERANCE_S)
    last = min(bisect.bisect_left(entries, stop, key=timestamp), len(entries) - 1)
    # entries are in decode order, which is file order for one stream; take the extremes anyway
    chosen = [entries[i] for i in range(first, last + 1)]
    reader.plan(min(e.pos for e in chosen), max(e.pos + e.size for e in chosen))

"""Opening a video for reading through fsspec, so reads are ranged requests, not downloads."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from ..io.datafile import is_local, resolve
from .clip_ref import ClipRef
from .ranged import MAX_READAHEAD_BYTES, RangedReader, plan_clip, plan_index

# The most a read of a remote video fetches at once outside a clip's planned range.
READ_BLOCK_BYTES = MAX_READAHEAD_BYTES
# The reader behind each open container (by id) that reads a remote file.
_READERS: dict[int, RangedReader] = {}


# Opening a file without decoding its first frames: the stream's codec, size, time base and
# codec setup (extradata) are known, its pixel format is not.
WITHOUT_PROBE_DECODING = {"skip_frame": "all"}


@contextlib.contextmanager
def open_video(
    url: str, storage_options: dict[str, Any] | None, decode_probe: bool = True
) -> Iterator[tuple[Any, Any]]:
    """``(container, video stream)`` of the video at ``url``: a local file as it is, a remote
    one through a :class:`~refiner_core.video.ranged.RangedReader` (byte ranges, no block
    cache); ``FileNotFoundError`` / ``ValueError`` name the URL. ``decode_probe=False``
    opens it without decoding frames (several times faster; the stream's ``pix_fmt`` is then
    unknown and its own decoder skips every frame: demux only)."""
    import av

    fs, path = resolve(url, storage_options)
    try:
        if is_local(fs):
            if not os.path.isfile(path):
                raise FileNotFoundError(path)
            handle: Any = None  # FFmpeg reads a local file itself, faster than through Python
        else:
            handle = RangedReader(fs, path, int(fs.size(path)))
            plan_index(handle)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"video {url} does not exist: {exc}") from exc
    try:
        try:
            options = None if decode_probe else WITHOUT_PROBE_DECODING
            container = av.open(path if handle is None else handle, mode="r", options=options)
        except av.error.FFmpegError as exc:
            raise ValueError(f"cannot open video {url}: {exc}; is it a video file?") from exc
        with container:
            if not container.streams.video:
                raise ValueError(f"{url} holds no video stream")
            if isinstance(handle, RangedReader):
                _READERS[id(container)] = handle
            try:
                yield container, container.streams.video[0]
            finally:
                _READERS.pop(id(container), None)
    finally:
        if handle is not None:
            handle.close()


def seconds(pts: int, time_base: Fraction) -> float:
    return float(pts * time_base)


def seek_before(container: Any, stream: Any, at_seconds: float) -> None:
    """Seek to the last keyframe at or before ``at_seconds`` (or the start)."""
    target = int(Fraction(at_seconds).limit_denominator(1_000_000) / stream.time_base)
    container.seek(max(0, target), stream=stream, backward=True, any_frame=False)


def seek_clip(container: Any, stream: Any, clip: ClipRef) -> None:
    """Seek to the keyframe before ``clip`` and, for a remote file, plan to read its packets
    in one range (see :func:`~refiner_core.video.ranged.plan_clip`)."""
    reader = _READERS.get(id(container))
    if reader is not None:
        plan_clip(reader, stream, clip.from_timestamp, clip.to_timestamp)
    seek_before(container, stream, clip.from_timestamp)

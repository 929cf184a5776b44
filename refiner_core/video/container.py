"""Opening a video for reading through fsspec, so reads are ranged requests, not downloads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from ..io.datafile import resolve

# How much a remote read fetches at once: a clip is read in requests of about this size,
# not as the whole file (s3fs's default block is 50 MiB).
READ_BLOCK_BYTES = 256 * 1024


@contextlib.contextmanager
def open_video(url: str, storage_options: dict[str, Any] | None) -> Iterator[tuple[Any, Any]]:
    """``(container, video stream)`` of the video at ``url``, read through a seekable fsspec
    file; ``FileNotFoundError`` / ``ValueError`` name the URL."""
    import av

    fs, path = resolve(url, storage_options)
    try:
        handle = fs.open(path, "rb", block_size=READ_BLOCK_BYTES)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"video {url} does not exist: {exc}") from exc
    with handle:
        try:
            container = av.open(handle, mode="r")
        except av.error.FFmpegError as exc:
            raise ValueError(f"cannot open video {url}: {exc}; is it a video file?") from exc
        with container:
            if not container.streams.video:
                raise ValueError(f"{url} holds no video stream")
            yield container, container.streams.video[0]


def seconds(pts: int, time_base: Fraction) -> float:
    return float(pts * time_base)


def seek_before(container: Any, stream: Any, at_seconds: float) -> None:
    """Seek to the last keyframe at or before ``at_seconds`` (or the start)."""
    target = int(Fraction(at_seconds).limit_denominator(1_000_000) / stream.time_base)
    container.seek(max(0, target), stream=stream, backward=True, any_frame=False)

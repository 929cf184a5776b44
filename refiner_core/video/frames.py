"""``read_frames``: the decoded frames of a clip with their times."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .clip_ref import TIME_TOLERANCE_S, parse_clip
from .container import open_video, seconds, seek_clip


def read_frames(
    ref: Any, storage_options: dict[str, Any] | None = None
) -> Generator[tuple[float, Any], None, None]:
    """Yield ``(timestamp, frame)`` for each frame of ``ref``'s time range, in order.

    ``timestamp`` is in seconds on the file's timeline (the timeline of ``from_timestamp``
    and ``to_timestamp``); ``frame`` is a numpy ``uint8`` array of shape ``(height, width, 3)``
    (RGB). Decoding starts at the keyframe before the clip; only the byte ranges it needs
    are read.
    """
    clip = parse_clip(ref)
    with open_video(clip.path, storage_options) as (container, stream):
        seek_clip(container, stream, clip)
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            at = seconds(frame.pts, stream.time_base)
            if at >= clip.to_timestamp - TIME_TOLERANCE_S:
                return
            if clip.contains(at):
                yield at, frame.to_ndarray(format="rgb24")

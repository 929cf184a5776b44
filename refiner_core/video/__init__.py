"""Video clips on PyAV: a clip is a time range of a video file (``mdr.datatype.video_clip()``)."""

from .clip_ref import ClipRef, parse_clip
from .clips import ClipNotOnKeyframe, read_clip
from .frames import read_frames

__all__ = ["ClipNotOnKeyframe", "ClipRef", "parse_clip", "read_clip", "read_frames"]

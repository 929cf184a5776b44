"""Video clips on PyAV: a clip is a time range of a video file (``mdr.datatype.video_clip()``)."""

from .audit import VideoAudit, VideoFailure, verify_video
from .clip_ref import ClipRef, parse_clip
from .clips import ClipNotOnKeyframe, read_clip
from .frames import read_frames

__all__ = [
    "ClipNotOnKeyframe",
    "ClipRef",
    "VideoAudit",
    "VideoFailure",
    "parse_clip",
    "read_clip",
    "read_frames",
    "verify_video",
]

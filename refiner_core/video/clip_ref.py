"""A clip reference checked once: the file and the time range it names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Frame times and clip bounds are compared with this slack (seconds): bounds written as
# floats (``k / fps``) land a hair off the exact frame times.
TIME_TOLERANCE_S = 1e-4


@dataclass(frozen=True)
class ClipRef:
    """``[from_timestamp, to_timestamp)`` seconds of the video at ``path``."""

    path: str
    from_timestamp: float
    to_timestamp: float

    def contains(self, seconds: float) -> bool:
        """Whether a frame shown at ``seconds`` belongs to the clip."""
        return (
            self.from_timestamp - TIME_TOLERANCE_S <= seconds < self.to_timestamp - TIME_TOLERANCE_S
        )

    def describe(self) -> str:
        return f"clip {self.path} [{self.from_timestamp:g}s, {self.to_timestamp:g}s)"


def parse_clip(ref: Any) -> ClipRef:
    """``ref`` (a ``video_clip`` value) as a :class:`ClipRef`; ``ValueError`` naming the bad field.

    >>> parse_clip({"path": "a.mp4", "from_timestamp": 1.0, "to_timestamp": 2.5}).to_timestamp
    2.5
    """
    if isinstance(ref, ClipRef):
        return ref
    if not isinstance(ref, Mapping):
        raise TypeError(
            f"expected a video clip {{path, from_timestamp, to_timestamp}} mapping, got "
            f"{type(ref).__name__} {ref!r}"
        )
    path = ref.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError(f"video clip {dict(ref)!r} has no path; give the video file's path or URL")
    bounds = []
    for key in ("from_timestamp", "to_timestamp"):
        value = ref.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(
                f"video clip of {path} has {key}={value!r}; it must be a finite number of seconds"
            )
        bounds.append(float(value))
    start, stop = bounds
    if start < 0 or stop <= start:
        raise ValueError(
            f"video clip of {path} has from_timestamp={start} and to_timestamp={stop}; a clip "
            "needs 0 <= from_timestamp < to_timestamp"
        )
    return ClipRef(path, start, stop)

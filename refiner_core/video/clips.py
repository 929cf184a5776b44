"""``read_clip``: a standalone MP4 of a clip's time range, copied packet by packet when it can be."""

from __future__ import annotations

import io
from fractions import Fraction
from typing import Any

from ..errors import RefinerError
from .clip_ref import TIME_TOLERANCE_S, ClipRef, parse_clip
from .container import open_video, seconds, seek_before, seek_clip


class ClipNotOnKeyframe(RefinerError, ValueError):
    """A clip starts between keyframes, so its packets alone cannot be decoded."""


def read_clip(
    ref: Any, storage_options: dict[str, Any] | None = None, reencode: bool = False
) -> bytes:
    """The bytes of an MP4 holding exactly the frames of ``ref``'s time range, starting at 0.

    Packets are copied without re-encoding, which needs the clip to start on a keyframe
    (LeRobot episodes do); otherwise :class:`ClipNotOnKeyframe` says so, and
    ``reencode=True`` decodes the range and encodes it again instead. Only the byte
    ranges of the file the clip needs are read, local or remote (any fsspec URL).

    Example:
        >>> import refiner_core as mdr
        >>> mdr.read_clip({"path": "/no/such.mp4", "from_timestamp": 0, "to_timestamp": 1})
        Traceback (most recent call last):
        ...
        FileNotFoundError: video /no/such.mp4 does not exist: ...
    """
    clip = parse_clip(ref)
    with open_video(clip.path, storage_options) as (container, stream):
        if reencode:
            return _reencode(clip, container, stream)
        return _remux(clip, container, stream)


def _packets_in(clip: ClipRef, container: Any, stream: Any) -> list[Any]:
    """The packets (decode order) whose frames fall in ``clip``, from the keyframe before it."""
    seek_clip(container, stream, clip)
    tb = float(stream.time_base)  # float seconds: exact enough within TIME_TOLERANCE_S
    chosen = []
    for packet in container.demux(stream):
        if packet.pts is None:
            continue
        if packet.dts is not None and packet.dts * tb >= clip.to_timestamp - TIME_TOLERANCE_S:
            break  # decode order: every later packet is shown later still
        if clip.contains(packet.pts * tb):
            chosen.append(packet)
    return chosen


def _remux(clip: ClipRef, container: Any, stream: Any) -> bytes:
    import av

    packets = _packets_in(clip, container, stream)
    if not packets:
        raise ValueError(f"{clip.describe()} holds no frames; check its timestamps")
    first = packets[0]
    start = min(p.pts for p in packets)
    if not first.is_keyframe or first.pts != start:
        keyframe = _keyframe_before(container, stream, clip.from_timestamp)
        raise ClipNotOnKeyframe(
            f"{clip.describe()} starts at {seconds(start, stream.time_base):g}s, which is not a "
            f"keyframe (the keyframe before it is at {keyframe:g}s), so its packets cannot be "
            "copied without the frames before it. Pass reencode=True to re-encode the clip, "
            "or start it on a keyframe"
        )
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as output:
        # opaque: the stream takes the input's codec as it is (no encoder of it is needed)
        out_stream = output.add_stream_from_template(stream, opaque=True)
        for packet in packets:
            packet.pts -= start
            packet.dts = None if packet.dts is None else packet.dts - start
            packet.stream = out_stream
            output.mux(packet)
    return buffer.getvalue()


def _keyframe_before(container: Any, stream: Any, at: float) -> float:
    seek_before(container, stream, at)
    for packet in container.demux(stream):
        if packet.pts is not None:
            return seconds(packet.pts, stream.time_base)
    return 0.0


def _reencode(clip: ClipRef, container: Any, stream: Any) -> bytes:
    import av

    seek_clip(container, stream, clip)
    rate = stream.average_rate or stream.guessed_rate or Fraction(30)
    buffer = io.BytesIO()
    count = 0
    with av.open(buffer, mode="w", format="mp4") as output:
        out_stream = output.add_stream(_encoder_for(stream), rate=rate)
        if not isinstance(out_stream, av.VideoStream):
            raise RuntimeError(f"encoder {out_stream.codec_context.name} is not a video encoder")
        out_stream.width = stream.codec_context.width
        out_stream.height = stream.codec_context.height
        out_stream.pix_fmt = "yuv420p"
        out_stream.time_base = stream.time_base
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            at = seconds(frame.pts, stream.time_base)
            if at >= clip.to_timestamp - TIME_TOLERANCE_S:
                break
            if not clip.contains(at):
                continue
            fresh = frame.reformat(format="yuv420p")
            fresh.pts = round((Fraction(at) - Fraction(clip.from_timestamp)) / stream.time_base)
            fresh.pts = max(0, fresh.pts)
            fresh.time_base = stream.time_base
            output.mux(out_stream.encode(fresh))
            count += 1
        output.mux(out_stream.encode(None))
    if not count:
        raise ValueError(f"{clip.describe()} holds no frames; check its timestamps")
    return buffer.getvalue()


def _encoder_for(stream: Any) -> str:
    """The input's codec when this PyAV can encode it, else H.264 (then MPEG-4 Part 2)."""
    import av

    for name in (stream.codec_context.name, "libx264", "h264", "mpeg4"):
        try:
            av.codec.Codec(name, "w")
        except Exception:
            continue
        return name
    raise RuntimeError("this PyAV build has no H.264 or MPEG-4 encoder to re-encode clips with")

"""Concatenating clips into one MP4 on local disk: packets copied when the formats agree,
frames re-encoded when they do not.

A :class:`RemuxedFile` takes the format (codec, size, pixel format, time base) of its first
clip and accepts only clips of that format, whose packets it copies with their times moved
to follow the previous clip. An :class:`EncodedFile` decodes any clip, scales it to its size
and encodes it (H.264 when this PyAV has it). Both start each clip on a keyframe, so every
clip of the file can be decoded on its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import RefinerError
from .clip_ref import ClipRef
from .clips import ClipNotOnKeyframe, _packets_in
from .container import open_video, seek_clip

# At most this many decoded frames of a clip are sampled for its image statistics, scaled
# down to about this many pixels on their longer side.
MAX_SAMPLED_FRAMES = 100
SAMPLE_SIDE = 150
# A remuxed clip of up to this many frames is decoded whole for its statistics; a longer
# one only at up to KEYFRAME_SAMPLES of its keyframes, evenly spread (a keyframe decodes on
# its own), so copying its packets does not cost a full decode.
FULL_DECODE_FRAMES = 100
KEYFRAME_SAMPLES = 3


@dataclass(frozen=True)
class VideoFormat:
    """What must agree for packets of one video to be copied into another's stream."""

    codec: str
    width: int
    height: int
    pix_fmt: str | None
    time_base: Fraction

    @classmethod
    def of(cls, stream: Any) -> VideoFormat:
        context = stream.codec_context
        return cls(context.name, context.width, context.height, context.pix_fmt, stream.time_base)

    def describe(self) -> str:
        return f"{self.codec} {self.width}x{self.height} {self.pix_fmt} time base {self.time_base}"


@dataclass(frozen=True)
class Appended:
    """Where a clip landed in the file: ``[from_timestamp, to_timestamp)`` seconds, its frame
    count, a sample of its decoded frames (RGB ``uint8``, ``(n, h, w, 3)``; empty when none
    was asked for) and how many frames were decoded to append it."""

    from_timestamp: float
    to_timestamp: float
    frames: int
    sample: np.ndarray
    decoded: int = 0


class _File:
    def __init__(self, path: str, fps: float) -> None:
        import av

        self.path = path
        self.fps = Fraction(fps).limit_denominator(1_000_000)
        self.output = av.open(path, mode="w", format="mp4")
        self.stream: Any = None
        self.end = Fraction(0)  # seconds where the next clip starts

    def size(self) -> int:
        return os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def close(self) -> None:
        self.output.close()


class IncompatibleClip(RefinerError, ValueError):
    """A clip whose format differs from the file's, so its packets cannot be copied in."""


class RemuxedFile(_File):
    """An MP4 of copied packets; its format is its first clip's, which must have ``size``
    (width, height) when given."""

    def __init__(self, path: str, fps: float, size: tuple[int, int] | None = None) -> None:
        super().__init__(path, fps)
        self.required_size = size
        self.format: VideoFormat | None = None
        self.extradata = b""

    def accepts(self, fmt: VideoFormat) -> bool:
        if self.format is None:
            return self.required_size in (None, (fmt.width, fmt.height))
        return self.format == fmt

    def append(
        self, clip: ClipRef, storage_options: dict[str, Any] | None, sample: bool = True
    ) -> Appended:
        """Copy ``clip``'s packets after the file's last clip, decoding a sample of its
        frames when ``sample``; ``ClipNotOnKeyframe`` when the clip does not start on a
        keyframe, :class:`IncompatibleClip` when its format disagrees."""
        if self.format is not None:
            # a clip encoded like the file's first one needs no decoding to be told apart
            with open_video(clip.path, storage_options, decode_probe=False) as (container, stream):
                if self._same_setup(stream):
                    return self._copy(clip, container, stream, self.format, sample)
        with open_video(clip.path, storage_options) as (container, stream):
            fmt = VideoFormat.of(stream)
            if not self.accepts(fmt):
                raise IncompatibleClip(f"{clip.describe()} is {fmt.describe()}")
            return self._copy(clip, container, stream, fmt, sample)

    def _same_setup(self, stream: Any) -> bool:
        """Whether ``stream`` has the file's codec, size, time base and codec setup (whose
        parameter sets fix the pixel format too)."""
        assert self.format is not None
        context = stream.codec_context
        return bool(self.extradata) and (
            (context.name, context.width, context.height, stream.time_base)
            == (self.format.codec, self.format.width, self.format.height, self.format.time_base)
            and bytes(context.extradata or b"") == self.extradata
        )

    def _copy(
        self, clip: ClipRef, container: Any, stream: Any, fmt: VideoFormat, sample: bool
    ) -> Appended:
        packets = _packets_in(clip, container, stream)
        if not packets:
            raise ValueError(f"{clip.describe()} holds no frames; check its timestamps")
        start = min(p.pts for p in packets)
        if not packets[0].is_keyframe or packets[0].pts != start:
            raise ClipNotOnKeyframe(f"{clip.describe()} does not start on a keyframe")
        images = _decode(stream, packets) if sample else _Sampler(0)
        if self.stream is None:
            self.stream = self.output.add_stream_from_template(stream, opaque=True)
            self.format = fmt
            self.extradata = bytes(stream.codec_context.extradata or b"")
        shift = round(self.end / fmt.time_base) - start
        for packet in packets:
            packet.pts += shift
            packet.dts = None if packet.dts is None else packet.dts + shift
            packet.stream = self.stream
            self.output.mux(packet)
        return self._advance(len(packets), images, fmt.time_base)

    def _advance(self, frames: int, images: _Sampler, time_base: Fraction) -> Appended:
        begin = self.end
        # the next clip starts one frame period after this one's frames, on the time base
        self.end = round((begin + frames / self.fps) / time_base) * time_base
        end = float(begin + frames / self.fps)
        return Appended(float(begin), end, frames, _sample(images.images), images.seen)


class EncodedFile(_File):
    """An MP4 this process encodes at ``width`` x ``height`` (yuv420p), frame by frame."""

    def __init__(self, path: str, fps: float, width: int, height: int) -> None:
        super().__init__(path, fps)
        encoder = _encoder()
        # near-lossless: the frames were encoded once already
        options = {"crf": "18"} if encoder == "libx264" else {}
        self.stream = self.output.add_stream(encoder, rate=self.fps, options=options)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv420p"
        self.stream.codec_context.time_base = 1 / self.fps
        self._frames = 0

    def append(self, clip: ClipRef, storage_options: dict[str, Any] | None) -> Appended:
        """Decode ``clip`` and encode its frames after the file's last clip."""
        import av

        begin = self._frames
        sampler = _Sampler(round((clip.to_timestamp - clip.from_timestamp) * self.fps))
        with open_video(clip.path, storage_options) as (container, stream):
            seek_clip(container, stream, clip)
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                at = float(frame.pts * stream.time_base)
                if at >= clip.to_timestamp - 1e-4:
                    break
                if not clip.contains(at):
                    continue
                image = frame.reformat(
                    width=self.stream.width, height=self.stream.height, format="rgb24"
                ).to_ndarray()
                fresh = av.VideoFrame.from_ndarray(image, format="rgb24")
                sampler.offer(fresh)
                fresh.pts, fresh.time_base = self._frames, 1 / self.fps
                if self._frames == begin:
                    fresh.pict_type = av.video.frame.PictureType.I
                for packet in self.stream.encode(fresh):
                    self.output.mux(packet)
                self._frames += 1
        if self._frames == begin:
            raise ValueError(f"{clip.describe()} holds no frames; check its timestamps")
        start = Fraction(begin) / self.fps
        self.end = Fraction(self._frames) / self.fps
        frames = self._frames - begin
        return Appended(float(start), float(self.end), frames, _sample(sampler.images), frames)

    def close(self) -> None:
        for packet in self.stream.encode(None):
            self.output.mux(packet)
        super().close()


def _decode(stream: Any, packets: list[Any]) -> _Sampler:
    """A sample of the packets' frames (see :class:`_Sampler`), decoded: every frame of a
    short clip, evenly spread keyframes of a longer one (see :data:`FULL_DECODE_FRAMES`)."""
    import av

    context = av.CodecContext.create(stream.codec_context.name, "r")
    if stream.codec_context.extradata:
        context.extradata = stream.codec_context.extradata
    if len(packets) > FULL_DECODE_FRAMES:
        keyframes = [p for p in packets if p.is_keyframe]
        step = max(1, -(-len(keyframes) // KEYFRAME_SAMPLES))
        packets = keyframes[::step]
    sampler = _Sampler(len(packets))
    for packet in [*packets, None]:
        for frame in context.decode(packet):
            sampler.offer(frame)
    return sampler


class _Sampler:
    """Keeps every n-th of ``expected`` frames (at most :data:`MAX_SAMPLED_FRAMES`), as RGB
    images scaled down to about :data:`SAMPLE_SIDE` pixels, as LeRobot samples its stats."""

    def __init__(self, expected: int) -> None:
        self.step = max(1, -(-expected // MAX_SAMPLED_FRAMES))
        self.seen = 0
        self.images: list[np.ndarray] = []

    def offer(self, frame: Any) -> None:
        if self.seen % self.step == 0:
            scale = max(1, max(frame.width, frame.height) // SAMPLE_SIDE)
            self.images.append(
                frame.to_ndarray(
                    width=max(1, frame.width // scale),
                    height=max(1, frame.height // scale),
                    format="rgb24",
                )
            )
        self.seen += 1


def _sample(images: list[np.ndarray]) -> np.ndarray:
    if not images:
        return np.zeros((0, 1, 1, 3), np.uint8)
    return np.stack(images)


def _encoder() -> str:
    import av

    for name in ("libx264", "h264", "mpeg4"):
        try:
            av.codec.Codec(name, "w")
        except Exception:
            continue
        return name
    raise RuntimeError("this PyAV build has no H.264 or MPEG-4 encoder to re-encode clips with")

"""``verify_video``: check a LeRobot dataset's videos against its episodes table, frame by frame,
from packet timestamps alone (no full decode).

Each video file is demuxed once (a v3.0 file holds many episodes; its packets are split by
the episodes' ``[from_timestamp, to_timestamp)`` ranges), files in parallel. Per episode and
camera the checks are:

``frame_count``      the frames in the range equal the episode's ``length``
``first_timestamp``  the first frame lies within half a frame of ``from_timestamp``
``last_timestamp``   the last frame lies within half a frame of ``to_timestamp - 1/fps``
``gap``              no two consecutive frames lie more than ``GAP_FRAMES / fps`` apart
``monotonic``        decode timestamps increase and no two frames share a time
``table_span``       ``(to_timestamp - from_timestamp) * fps`` equals ``length``
``overlap``          no two episodes of one file claim the same frames

and per file: ``missing`` (no such file), ``unreadable`` (not a video), ``truncated`` (an MP4
box reaching past the end of the file, fewer packets than the container's index lists, a
packet reaching past the end of the file, the stream's duration not reached, or the last
frame not decoding: the only frames decoded are those from the file's last keyframe on).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..io.datafile import resolve
from ..sources.lerobot_meta import Episode, load_meta
from .boxes import box_overrun
from .container import open_video, seconds

Check = Literal[
    "frame_count",
    "first_timestamp",
    "last_timestamp",
    "gap",
    "monotonic",
    "table_span",
    "overlap",
    "missing",
    "unreadable",
    "truncated",
]

# Consecutive frames further apart than this many frame periods are a gap: one missing
# frame makes a 2-period step, while encoder timestamp rounding stays well under 1.5.
GAP_FRAMES = 1.5
# Files demuxed at once; the work is mostly waiting on reads (ranged requests on S3).
DEFAULT_WORKERS = 8
# Reads while walking an MP4's top-level boxes: each needs only a 16-byte header.
_BOX_READ_BYTES = 4096


@dataclass(frozen=True)
class VideoFailure:
    """One failed check: which episodes and camera, which file, and the numbers."""

    check: Check
    camera: str
    file: str
    episodes: tuple[int, ...]
    detail: str

    def __str__(self) -> str:
        which = ", ".join(str(e) for e in self.episodes[:10])
        if len(self.episodes) > 10:
            which += f", ... ({len(self.episodes)} episodes)"
        noun = "episode" if len(self.episodes) == 1 else "episodes"
        return f"{noun} {which}, camera {self.camera}, {self.file}: {self.check}: {self.detail}"


@dataclass
class VideoAudit:
    """What ``verify_video`` checked and every failure it found; ``ok`` when there is none."""

    root: str
    fps: float
    files: int = 0
    clips: int = 0
    packets: int = 0
    frames_decoded: int = 0
    failures: list[VideoFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class _Clip:
    episode: Episode
    from_timestamp: float
    to_timestamp: float


@dataclass
class _FileResult:
    packets: int = 0
    frames_decoded: int = 0
    failures: list[VideoFailure] = field(default_factory=list)


def verify_video(
    root: str,
    *,
    episodes: list[int] | None = None,
    video_keys: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    max_workers: int = DEFAULT_WORKERS,
) -> VideoAudit:
    """Check every episode × camera of the LeRobot dataset at ``root`` (v3.0 or v2.1, local or
    any fsspec URL) against its video's packets; see the module docstring for the checks.

    Example:
        >>> import refiner_core as mdr
        >>> mdr.verify_video("/no/such/dataset")
        Traceback (most recent call last):
        ...
        ValueError: read_lerobot /no/such/dataset: no meta/info.json; point root at the folder ...
    """
    if max_workers < 1:
        raise ValueError(f"verify_video: max_workers={max_workers!r} must be at least 1")
    meta = load_meta(root, storage_options, video_keys)
    chosen = list(meta.episodes)
    if episodes is not None:
        known = {e.index for e in chosen}
        unknown = sorted(set(episodes) - known)
        if unknown:
            raise ValueError(
                f"verify_video {meta.root}: episodes {unknown} are not in the dataset; it has "
                f"{len(known)} episodes, indexes {min(known, default=0)}..{max(known, default=-1)}"
            )
        wanted = set(episodes)
        chosen = [e for e in chosen if e.index in wanted]
    files: dict[tuple[str, str], list[_Clip]] = {}
    for episode in chosen:
        for key, video in episode.videos:
            clip = _Clip(episode, video.from_timestamp, video.to_timestamp)
            files.setdefault((key, video.url), []).append(clip)
    audit = VideoAudit(meta.root, meta.fps, files=len(files), clips=sum(map(len, files.values())))
    if not files:
        return audit
    with ThreadPoolExecutor(max_workers=min(max_workers, len(files))) as pool:
        results = pool.map(
            lambda item: _check_file(item[0][0], item[0][1], item[1], meta.fps, storage_options),
            files.items(),
        )
        for result in results:
            audit.packets += result.packets
            audit.frames_decoded += result.frames_decoded
            audit.failures.extend(result.failures)
    return audit


@dataclass(frozen=True)
class _Packets:
    """A file's packets: presentation times (seconds, sorted) and the decode-order faults."""

    times: np.ndarray
    backwards: np.ndarray  # (pts, dts) seconds of packets whose dts does not advance
    indexed: int  # packets the container's index lists (0 when unknown)
    stream_end: float | None
    last_end_byte: int
    last_keyframe_pts: int | None
    last_pts: int | None


def _check_file(
    camera: str, url: str, clips: list[_Clip], fps: float, storage_options: dict[str, Any] | None
) -> _FileResult:
    result = _FileResult()
    indexes = tuple(c.episode.index for c in clips)

    def fail(check: Check, detail: str, episodes: tuple[int, ...] = indexes) -> None:
        result.failures.append(VideoFailure(check, camera, url, episodes, detail))

    fs, path = resolve(url, storage_options)
    try:
        size = int(fs.size(path))
    except FileNotFoundError:
        fail("missing", "the video file does not exist; re-encode or restore it")
        return result
    with fs.open(path, "rb", block_size=_BOX_READ_BYTES) as handle:
        overrun = box_overrun(handle, size)
    if overrun:
        fail("truncated", f"{overrun}; re-encode or restore the file")
    try:
        with open_video(url, storage_options) as (container, stream):
            packets = _demux(container, stream)
            result.packets = len(packets.times)
            result.frames_decoded = _check_end(packets, size, fps, container, stream, fail)
    except FileNotFoundError:
        fail("missing", "the video file does not exist; re-encode or restore it")
        return result
    except ValueError as exc:
        if not overrun:
            check: Check = "truncated" if _is_eof(exc.__cause__) else "unreadable"
            fail(check, f"{size:,} bytes that do not open as a video ({exc.__cause__ or exc})")
        return result
    for clip in clips:
        for check, detail in _check_clip(clip, packets, fps):
            fail(check, detail, (clip.episode.index,))
    for before, after in _overlaps(clips, fps):
        fail(
            "overlap",
            f"episode {before.episode.index} [{before.from_timestamp:g}s, "
            f"{before.to_timestamp:g}s) and episode {after.episode.index} "
            f"[{after.from_timestamp:g}s, {after.to_timestamp:g}s) claim the same frames; "
            "fix their timestamps in meta/episodes",
            (before.episode.index, after.episode.index),
        )
    return result


def _overlaps(clips: list[_Clip], fps: float) -> Iterable[tuple[_Clip, _Clip]]:
    """Neighbouring clips of one file whose ranges share more than half a frame."""
    ordered = sorted(clips, key=lambda c: (c.from_timestamp, c.episode.index))
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after.from_timestamp < before.to_timestamp - 0.5 / fps:
            yield before, after


def _is_eof(error: BaseException | None) -> bool:
    import av

    return isinstance(error, av.error.EOFError)


def _demux(container: Any, stream: Any) -> _Packets:
    """One pass over the file's packets; only their fields are kept, as arrays."""
    import av

    pts: list[int] = []
    dts: list[int | None] = []
    ends: list[int] = []
    keyframes: list[int] = []
    try:
        for packet in container.demux(stream):
            at, size = packet.pts, packet.size
            if at is None or not size:
                continue  # the flush packet at the end
            pts.append(at)
            dts.append(packet.dts)
            position = packet.pos
            if position is not None and position >= 0:
                ends.append(position + size)
            if packet.is_keyframe:
                keyframes.append(at)
    except av.error.FFmpegError as exc:
        raise ValueError(f"demuxing stopped after {len(pts)} packets") from exc
    tb = float(stream.time_base)
    shown = np.asarray(pts, np.float64) * tb
    decoded = np.asarray(dts, np.float64) * tb  # None (no dts) becomes NaN
    order = np.flatnonzero(~np.isnan(decoded))
    stuck = order[1:][np.diff(decoded[order]) <= 0]
    end = None if stream.duration is None else stream.duration * tb
    if end is not None and stream.start_time is not None:
        end += stream.start_time * tb
    return _Packets(
        np.sort(shown),
        np.stack([shown[stuck], decoded[stuck]], axis=1),
        int(stream.frames or 0),
        end,
        max(ends, default=0),
        max(keyframes, default=None),
        max(pts, default=None),
    )


def _check_end(
    packets: _Packets, size: int, fps: float, container: Any, stream: Any, fail: Any
) -> int:
    """The file-level truncation checks; decodes from the last keyframe to the end and
    returns how many frames that took."""
    import av

    count = len(packets.times)
    if packets.indexed and count < packets.indexed:
        fail(
            "truncated",
            f"demuxed {count} packets but the container's index lists {packets.indexed}; "
            f"the file ({size:,} bytes) was cut short",
        )
        return 0
    if packets.last_end_byte > size:
        fail(
            "truncated",
            f"the last packet ends at byte {packets.last_end_byte:,} but the file has "
            f"{size:,} bytes",
        )
        return 0
    if len(packets.times) and packets.stream_end is not None:
        reached = packets.times[-1] + 1.0 / fps
        if reached < packets.stream_end - GAP_FRAMES / fps:
            fail(
                "truncated",
                f"frames reach {reached:.3f}s but the stream's duration says "
                f"{packets.stream_end:.3f}s",
            )
            return 0
    if packets.last_keyframe_pts is None:
        return 0
    container.seek(packets.last_keyframe_pts, stream=stream, backward=True, any_frame=False)
    decoded, last = 0, None
    try:
        for frame in container.decode(stream):
            decoded += 1
            if frame.pts is not None:
                last = frame.pts if last is None else max(last, frame.pts)
    except av.error.FFmpegError as exc:
        fail("truncated", f"the last frames do not decode: {exc}")
        return decoded
    if packets.last_pts is not None and last != packets.last_pts:
        tb = stream.time_base
        shown = "none" if last is None else f"{seconds(last, tb):.3f}s"
        fail(
            "truncated",
            f"the last frame ({seconds(packets.last_pts, tb):.3f}s) does not decode "
            f"(the last decoded frame is at {shown})",
        )
    return decoded


def _check_clip(clip: _Clip, packets: _Packets, fps: float) -> Iterable[tuple[Check, str]]:
    """``(check, detail)`` for each check the clip's frames fail."""
    period, half = 1.0 / fps, 0.5 / fps
    start, stop, length = clip.from_timestamp, clip.to_timestamp, clip.episode.length
    span = (stop - start) * fps
    if abs(span - length) > 0.5:
        yield (
            "table_span",
            f"from_timestamp={start:g}s to to_timestamp={stop:g}s spans {span:.2f} frames at "
            f"{fps:g} fps but length={length}; fix meta/episodes",
        )
    times = packets.times
    lo, hi = np.searchsorted(times, [start - half, stop - half])
    frames = times[lo:hi]
    if len(frames) != length:
        yield (
            "frame_count",
            f"the video has {len(frames)} frames in [{start:g}s, {stop:g}s) but length={length}",
        )
    if not len(frames):
        return
    if frames[0] > start + half:
        yield (
            "first_timestamp",
            f"the first frame is at {frames[0]:.4f}s, from_timestamp={start:g}s "
            f"({(frames[0] - start) * fps:.2f} frames late)",
        )
    want_last = stop - period
    if abs(frames[-1] - want_last) > half:
        yield (
            "last_timestamp",
            f"the last frame is at {frames[-1]:.4f}s, to_timestamp - 1/fps={want_last:.4f}s "
            f"({(frames[-1] - want_last) * fps:+.2f} frames)",
        )
    steps = np.diff(frames)
    gaps = np.flatnonzero(steps > GAP_FRAMES * period)
    if len(gaps):
        a, b = frames[gaps[0]], frames[gaps[0] + 1]
        yield (
            "gap",
            f"{len(gaps)} gap(s) longer than {GAP_FRAMES:g} frames; the first has no frame "
            f"between {a:.4f}s and {b:.4f}s ({(b - a) * fps - 1:.0f} frame(s) missing)",
        )
    repeats = np.flatnonzero(steps < 1e-6)
    if len(repeats):
        first = frames[repeats[0]]
        yield "monotonic", f"{len(repeats)} frame(s) share a time, the first at {first:.4f}s"
    stuck = packets.backwards
    stuck = stuck[(stuck[:, 0] >= start - half) & (stuck[:, 0] < stop - half)]
    if len(stuck):
        yield (
            "monotonic",
            f"{len(stuck)} packet(s) do not advance the decode time, the first at "
            f"dts {stuck[0, 1]:.4f}s",
        )

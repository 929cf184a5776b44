"""Synthetic robot episodes with real encoded video, for the demo's LeRobot dataset.

:func:`ensure_robot_episodes` writes, once, one H.264 MP4 per episode (a single camera)
under ``<folder>/episode_XXX.mp4`` and returns the episode rows ``write_lerobot`` takes:
``tasks``, the camera's ``video_clip`` (the whole file), and per-frame ``observation.state``
and ``action`` lists. Frame ``k`` of every episode is a solid image whose value is
:func:`frame_value` ``(episode, k)``, so a decoded frame tells which one it is.

One episode can be made to *drift*: its camera clock runs slow, so that its frame count
is right but its last frame lands :data:`DRIFT_FRAMES` of a frame period late. ``write_lerobot``
copies those timestamps as they are and ``video_integrity`` then fails on that episode;
:func:`keeps_time` finds it upstream from its packet timestamps alone.

Example:
    >>> import tempfile
    >>> from refiner_dagster.demo.robotics import ensure_robot_episodes, keeps_time
    >>> rows = ensure_robot_episodes(tempfile.mkdtemp(), episodes=2, seconds=1.0, drifting=1)
    >>> [len(r["observation.state"]) for r in rows], [keeps_time(r) for r in rows]
    ([10, 10], [True, False])
"""

from __future__ import annotations

import os
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

CAMERA = "observation.images.front"
FPS = 10
WIDTH, HEIGHT = 64, 48
TASKS = ("pick up the red block", "open the top drawer")
# How late the drifting episode's last frame is, in frame periods (over half a frame is
# a drift; a whole one would push the last frame out of the episode's time range).
DRIFT_FRAMES = 0.75
# Every episode's video uses this time base, so all of them can be copied into one file.
TIME_BASE = Fraction(1, 1000)


def frame_value(episode: int, frame: int) -> int:
    """The pixel value of frame ``frame`` of episode ``episode`` (8 to 247)."""
    return (episode * 60 + frame * 7) % 240 + 8


def _encode(path: Path, episode: int, frames: int, drift: float) -> None:
    """Encode the episode; frame ``k`` is shown ``k * (1 + drift) / FPS`` seconds in."""
    import av

    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=FPS, options={"g": str(frames)})
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.codec_context.time_base = TIME_BASE
        for k in range(frames):
            image = np.full((HEIGHT, WIDTH, 3), frame_value(episode, k), np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = round(k * (1 + drift) / FPS / TIME_BASE)
            frame.time_base = TIME_BASE
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def _row(path: Path, episode: int, frames: int) -> dict[str, Any]:
    return {
        "tasks": [TASKS[episode % len(TASKS)]],
        CAMERA: {"path": str(path), "from_timestamp": 0.0, "to_timestamp": frames / FPS},
        "observation.state": [[float(episode), k / FPS] for k in range(frames)],
        "action": [[float(k % 3 - 1), 0.5] for k in range(frames)],
    }


def ensure_robot_episodes(
    folder: str | os.PathLike[str],
    *,
    episodes: int = 4,
    seconds: float = 2.0,
    drifting: int | None = None,
) -> list[dict[str, Any]]:
    """Write the episodes' videos under ``folder`` unless they are there; return their rows.

    ``drifting`` is the index of the episode whose clock drifts (none by default). Each
    file is encoded to a temporary name and renamed, so a reader never sees half a video.
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    frames = round(seconds * FPS)
    rows = []
    for episode in range(episodes):
        drift = DRIFT_FRAMES / max(1, frames - 1) if episode == drifting else 0.0
        tag = "-drifting" if drift else ""
        path = root / f"episode_{episode:03d}-{frames}f{tag}.mp4"
        if not path.exists():
            fd, partial = tempfile.mkstemp(dir=root, prefix=".partial-", suffix=".mp4")
            os.close(fd)
            try:
                _encode(Path(partial), episode, frames, drift)
                os.replace(partial, path)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
        rows.append(_row(path, episode, frames))
    return rows


def keeps_time(row: Any) -> bool:
    """Whether the episode's video frames fall within half a frame of ``k / FPS``.

    Reads packet timestamps only (no decoding); ``row`` is an episode row (a dict or an
    ``mdr.Row``) whose camera clip is a whole file.
    """
    import av

    clip = row[CAMERA]
    with av.open(clip["path"]) as container:
        stream = container.streams.video[0]
        stamps = sorted(
            float(p.pts * stream.time_base) for p in container.demux(stream) if p.pts is not None
        )
    return all(abs(at - k / FPS) <= 0.5 / FPS for k, at in enumerate(stamps))

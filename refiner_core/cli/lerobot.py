"""``refiner inspect`` and ``refiner preview`` on a LeRobot dataset (v3.0 or v2.1; written
by ``write_lerobot`` or by anyone else): episodes, cameras and lengths, and a contact sheet
of one decoded frame per episode and camera.

Example:
    >>> import io, tempfile, refiner_core as mdr
    >>> from rich.console import Console
    >>> from refiner_core.cli.lerobot import load_dataset, render_lerobot
    >>> out = tempfile.mkdtemp()
    >>> rows = [{"tasks": ["wave"], "observation.state": [[0.0], [0.5]]}]
    >>> _ = mdr.from_items(rows).write_lerobot(out, fps=10).launch_local()
    >>> console = Console(file=io.StringIO(), width=200)
    >>> render_lerobot(load_dataset(out), console)
    >>> "wave" in console.file.getvalue()
    True
"""

from __future__ import annotations

import base64
import html
import json
import posixpath
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ..io.datafile import resolve
from ..sources.lerobot_meta import Episode, LeRobotMeta, load_meta
from ..video.concat import VideoFormat
from ..video.container import open_video
from .console import print_whole
from .inspection import _counters_table, _where_table
from .preview import SCRIPT, STYLE, Preview, _counters
from .storage import NotAnOutput, StoredOutput, open_output

MAX_EPISODES_SHOWN = 20
# Contact-sheet frames are scaled to at most this many pixels on their longer side.
THUMBNAIL_SIDE = 240


@dataclass(frozen=True)
class LeRobotDataset:
    """A LeRobot dataset's ``meta/`` and, when refiner wrote it, its refiner records."""

    url: str
    info: dict[str, Any]
    meta: LeRobotMeta
    stored: StoredOutput | None
    storage_options: dict[str, Any] | None

    @property
    def frames(self) -> int:
        return sum(e.length for e in self.meta.episodes)


def load_dataset(root: str, storage_options: dict[str, Any] | None = None) -> LeRobotDataset:
    """The LeRobot dataset at ``root``; ``ValueError`` names the file and the fix."""
    meta = load_meta(root, storage_options, None)
    fs, base = resolve(root, storage_options)
    with fs.open(posixpath.join(base, "meta", "info.json"), "rb") as f:
        info = json.load(f)
    try:
        stored: StoredOutput | None = open_output(root, storage_options)
    except NotAnOutput:
        stored = None  # a dataset refiner did not write: no _refiner/ records
    return LeRobotDataset(meta.root, info, meta, stored, storage_options)


def _overview(dataset: LeRobotDataset) -> Table:
    info, meta = dataset.info, dataset.meta
    table = Table(title="LeRobot dataset", show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("url", dataset.url)
    table.add_row("codebase_version", str(info.get("codebase_version")))
    table.add_row("robot_type", str(info.get("robot_type")))
    table.add_row("fps", f"{meta.fps:g}")
    table.add_row("episodes", f"{len(meta.episodes):,}")
    table.add_row("frames", f"{dataset.frames:,} ({dataset.frames / meta.fps:,.1f} s)")
    table.add_row("tasks", f"{len(meta.tasks):,}")
    table.add_row("cameras", ", ".join(meta.video_keys) or "-")
    if dataset.stored is None:
        state = "not written by refiner (no _refiner/ records)"
    elif dataset.stored.finalized:
        state = "written by refiner, finalized"
    else:
        state = "written by refiner, not finalized"
    table.add_row("refiner", state)
    return table


def _cameras(dataset: LeRobotDataset) -> Table:
    table = Table(title="Cameras", title_justify="left")
    for name in ("camera", "codec", "size", "pix_fmt", "files", "seconds"):
        table.add_column(name, no_wrap=True, justify="right" if name == "seconds" else "left")
    for key in dataset.meta.video_keys:
        clips = [dict(e.videos)[key] for e in dataset.meta.episodes]
        fmt = _format_of(clips[0].url, dataset.storage_options) if clips else None
        table.add_row(
            key,
            fmt.codec if fmt else "-",
            f"{fmt.width}x{fmt.height}" if fmt else "-",
            str(fmt.pix_fmt) if fmt else "-",
            str(len({c.url for c in clips})),
            f"{sum(c.to_timestamp - c.from_timestamp for c in clips):,.1f}",
        )
    return table


def _format_of(url: str, options: dict[str, Any] | None) -> VideoFormat | None:
    """The format of the video at ``url`` as its file says (``None`` when it cannot be read)."""
    try:
        with open_video(url, options) as (_, stream):
            return VideoFormat.of(stream)
    except (FileNotFoundError, ValueError):
        return None


def _episodes(dataset: LeRobotDataset, show_all: bool) -> Table:
    episodes = dataset.meta.episodes
    shown = episodes if show_all else episodes[:MAX_EPISODES_SHOWN]
    table = Table(title="Episodes", title_justify="left")
    table.add_column("episode", justify="right", no_wrap=True)
    table.add_column("length", justify="right", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("tasks")
    for key in dataset.meta.video_keys:
        table.add_column(f"{key} [from, to) s", no_wrap=True)
    for episode in shown:
        clips = dict(episode.videos)
        table.add_row(
            str(episode.index),
            f"{episode.length:,}",
            f"{episode.length / dataset.meta.fps:,.2f}",
            "; ".join(episode.tasks),
            *(
                f"{posixpath.basename(c.url)} [{c.from_timestamp:g}, {c.to_timestamp:g})"
                for c in (clips[k] for k in dataset.meta.video_keys)
            ),
        )
    if len(shown) < len(episodes):
        table.caption = f"{len(episodes) - len(shown):,} more; --all lists every episode"
    return table


def render_lerobot(dataset: LeRobotDataset, console: Console, *, show_all: bool = False) -> None:
    """Print the dataset's overview, cameras, episodes and, when refiner wrote it, the
    counters of its write."""
    tables = [_overview(dataset), _cameras(dataset), _episodes(dataset, show_all)]
    if dataset.stored is not None:
        tables += [_counters_table(dataset.stored), _where_table(dataset.stored)]
    for table in tables:
        print_whole(console, table)


def _sampled(episodes: tuple[Episode, ...], count: int) -> list[Episode]:
    """``count`` episodes spread evenly over the dataset (all when there are fewer)."""
    if count >= len(episodes):
        return list(episodes)
    if count <= 1:
        return list(episodes[:count])
    step = (len(episodes) - 1) / (count - 1)
    return [episodes[round(i * step)] for i in range(count)]


def first_frame_png(url: str, start: float, fps: float, options: dict[str, Any] | None) -> bytes:
    """The first frame of the clip at ``start`` seconds of ``url``, scaled down, as a PNG."""
    import av

    from ..video.frames import read_frames

    clip = {"path": url, "from_timestamp": start, "to_timestamp": start + 1.0 / fps}
    frames = read_frames(clip, options)
    try:
        _, image = next(frames)
    except StopIteration:
        raise ValueError(f"{url} has no frame at {start:g}s; run refiner verify on it") from None
    finally:
        frames.close()
    frame = av.VideoFrame.from_ndarray(image, format="rgb24")
    scale = min(1.0, THUMBNAIL_SIDE / max(frame.width, frame.height))
    width, height = max(1, round(frame.width * scale)), max(1, round(frame.height * scale))
    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "rgb24"
    small = frame.reformat(width=width, height=height, format="rgb24")
    return b"".join(bytes(p) for p in [*encoder.encode(small), *encoder.encode(None)])


def _contact_sheet(dataset: LeRobotDataset, sample: int) -> tuple[str, int]:
    meta = dataset.meta
    if not meta.video_keys or not meta.episodes:
        return "<p>No videos in this dataset.</p>", 0
    episodes = _sampled(meta.episodes, max(1, sample // len(meta.video_keys)))
    head = "".join(f"<th>{html.escape(k)}</th>" for k in meta.video_keys)
    rows, images = [], 0
    for episode in episodes:
        cells = []
        for key, clip in episode.videos:
            png = first_frame_png(clip.url, clip.from_timestamp, meta.fps, dataset.storage_options)
            label = f"episode {episode.index} · {key}"
            cells.append(
                f'<td><figure><img src="data:image/png;base64,{base64.b64encode(png).decode()}" '
                f'alt="{html.escape(label)}" data-episode="{episode.index}" '
                f'data-camera="{html.escape(key)}"><figcaption>{html.escape(label)} · '
                f"{episode.length} frames · from {clip.from_timestamp:g}s</figcaption></figure></td>"
            )
            images += 1
        tasks = html.escape("; ".join(episode.tasks))
        rows.append(
            f"<tr><th>episode {episode.index}<br><small>{tasks}</small></th>{''.join(cells)}</tr>"
        )
    note = (
        f"<p>The first frame of {len(episodes)} of {len(meta.episodes)} episode(s) × "
        f"{len(meta.video_keys)} camera(s).</p>"
    )
    return f'{note}<table class="episodes"><tr><th></th>{head}</tr>{"".join(rows)}</table>', images


def build_lerobot_preview(dataset: LeRobotDataset, *, sample: int = 24) -> Preview:
    """The preview page of a LeRobot dataset: its totals, a contact sheet of about ``sample``
    frames (whole episodes: every camera of each sampled episode) and the counters."""
    sheet, images = _contact_sheet(dataset, sample)
    meta, title = dataset.meta, html.escape(dataset.url)
    counters = f"<h2>Counters</h2>{_counters(dataset.stored)}" if dataset.stored is not None else ""
    page = (
        f'<!doctype html><html><head><meta charset="utf-8"><title>refiner preview: {title}'
        f"</title><style>{STYLE}</style><script>{SCRIPT}</script></head>"
        f'<body data-images-embedded="{images}">'
        f"<h1>refiner preview</h1><p><code>{title}</code> · LeRobot "
        f"{html.escape(str(dataset.info.get('codebase_version')))} · {len(meta.episodes)} "
        f"episodes · {dataset.frames} frames · {meta.fps:g} fps · "
        f"{len(meta.video_keys)} camera(s)</p>"
        f"<h2>Contact sheet</h2>{sheet}{counters}</body></html>"
    )
    return Preview(html=page, images=images)

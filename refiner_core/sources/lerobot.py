"""LeRobot v3.0 datasets as a source: rows are frames or episodes, cameras are video clips."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..datatype import video_clip
from ..io.datafile import resolve
from .base import Shard, check_num_shards, group_runs, log_short_plan, make_shards
from .lerobot_meta import Episode, LeRobotMeta, load_meta
from .row_ranges import ShardHint

RowsMode = Literal["frames", "episodes"]
# Without num_shards, a shard holds whole episodes of about this many frames in all.
TARGET_SHARD_FRAMES = 100_000

_CLIP_FIELD = video_clip()


class LeRobotSource:
    """Reads a LeRobot v3.0 dataset (local folder or any fsspec URL); a shard is a run of
    whole episodes, so an episode is never split between shards.

    ``rows="frames"`` gives the rows of ``data/`` (one per frame) plus, per camera, a
    ``video_clip`` of that frame's instant: ``[t, t + 1/fps)`` where ``t`` is the frame's
    time in its video file. ``rows="episodes"`` gives one row per episode: its
    ``episode_index``, ``length``, ``tasks``, one ``video_clip`` per camera and its
    statistics as the dataset keeps them, one ``stats/<feature>/<name>`` column each
    (``min``, ``max``, ``mean``, ``std``, ``count``, quantiles when present).
    ``episodes=`` reads only those episodes' data; ``video_keys=`` only those cameras.
    """

    name = "read_lerobot"

    def __init__(
        self,
        root: str,
        *,
        episodes: list[int] | None = None,
        rows: RowsMode = "frames",
        video_keys: list[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        num_shards: int | None = None,
    ) -> None:
        check_num_shards(num_shards)
        if rows not in ("frames", "episodes"):
            raise ValueError(f"read_lerobot: rows={rows!r} is not one of 'frames', 'episodes'")
        if episodes is not None and (
            isinstance(episodes, (str, bytes))
            or not all(isinstance(e, int) and not isinstance(e, bool) for e in episodes)
        ):
            raise TypeError(
                f"read_lerobot: episodes must be a list of episode indexes, got {episodes!r}"
            )
        if isinstance(video_keys, str):
            raise TypeError(f"read_lerobot: video_keys must be a list of keys, got {video_keys!r}")
        self.root = root
        self.episodes = None if episodes is None else sorted(set(episodes))
        self.rows = rows
        self.video_keys = None if video_keys is None else list(video_keys)
        self.storage_options = storage_options
        self.num_shards = num_shards

    def _meta(self) -> LeRobotMeta:
        return load_meta(
            self.root,
            self.storage_options,
            self.video_keys,
            with_stats=self.rows == "episodes",
        )

    def plan(self, hint: ShardHint | None = None) -> list[Shard]:
        meta = self._meta()
        chosen = list(meta.episodes)
        if self.episodes is not None:
            known = {e.index for e in chosen}
            unknown = [i for i in self.episodes if i not in known]
            if unknown:
                raise ValueError(
                    f"read_lerobot {meta.root}: episodes {unknown} are not in the dataset (it has "
                    f"{len(known)} episodes, indexes {min(known, default=0)}..{max(known, default=-1)})"
                )
            wanted = set(self.episodes)
            chosen = [e for e in chosen if e.index in wanted]
        runs = group_runs(
            [e.length for e in chosen], target=TARGET_SHARD_FRAMES, num_shards=self.num_shards
        )
        payloads = [(meta.fps, meta.tasks, tuple(chosen[i] for i in run)) for run in runs]
        log_short_plan("read_lerobot", self.num_shards, len(payloads), f"{len(chosen)} episodes")
        return make_shards(payloads, source="read_lerobot")

    def schema_hint(self) -> pa.Schema | None:
        return None

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[pa.Table]:
        fps, tasks, episodes = shard.payload
        if self.rows == "episodes":
            table = _episode_table(episodes)
            for start in range(0, table.num_rows, batch_rows):
                yield table.slice(start, batch_rows)
            return
        for group in _by_data_file(episodes):
            frames = _read_frames_of(group, self.storage_options)
            for episode in group:
                table = _frame_table(episode, frames, fps, tasks)
                for start in range(0, table.num_rows, batch_rows):
                    yield table.slice(start, batch_rows)


def _clip_column(name: str, paths: list[str], starts: list[float], stops: list[float]):
    values = pa.StructArray.from_arrays(
        [
            pa.array(paths, pa.string()),
            pa.array(starts, pa.float64()),
            pa.array(stops, pa.float64()),
            pa.nulls(len(paths), pa.uint64()),
            pa.nulls(len(paths), pa.uint64()),
            pa.nulls(len(paths), pa.string()),
        ],
        fields=list(_CLIP_FIELD.arrow_type),
    )
    return _CLIP_FIELD.to_field(name), values


def _episode_table(episodes: tuple[Episode, ...]) -> pa.Table:
    fields = [
        pa.field("episode_index", pa.int64()),
        pa.field("length", pa.int64()),
        pa.field("tasks", pa.list_(pa.string())),
    ]
    arrays = [
        pa.array([e.index for e in episodes], pa.int64()),
        pa.array([e.length for e in episodes], pa.int64()),
        pa.array([list(e.tasks) for e in episodes], pa.list_(pa.string())),
    ]
    keys = [key for key, _ in episodes[0].videos] if episodes else []
    for position, key in enumerate(keys):
        clips = [e.videos[position][1] for e in episodes]
        field, values = _clip_column(
            key,
            [c.url for c in clips],
            [c.from_timestamp for c in clips],
            [c.to_timestamp for c in clips],
        )
        fields.append(field)
        arrays.append(values)
    names = sorted({name for e in episodes for name, _ in e.stats})
    for name in names:
        values = pa.array([dict(e.stats).get(name) for e in episodes])
        fields.append(pa.field(name, values.type))
        arrays.append(values)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _by_data_file(episodes: tuple[Episode, ...]) -> list[list[Episode]]:
    """Runs of consecutive episodes that share a data file."""
    groups: list[list[Episode]] = []
    for episode in episodes:
        if groups and groups[-1][0].data_url == episode.data_url:
            groups[-1].append(episode)
        else:
            groups.append([episode])
    return groups


def _read_frames_of(group: list[Episode], storage_options: dict[str, Any] | None) -> pa.Table:
    """The rows of ``group``'s episodes in their data file, reading only the row groups
    whose statistics say they can hold them."""
    url = group[0].data_url
    fs, path = resolve(url, storage_options)
    wanted = [e.index for e in group]
    try:
        with fs.open(path, "rb") as f:
            return pq.read_table(f, filters=[("episode_index", "in", wanted)])
    except FileNotFoundError as exc:
        raise ValueError(
            f"read_lerobot: {url}, the data file of episodes {wanted}, does not exist; the "
            "dataset is incomplete (or pass episodes= without them)"
        ) from exc


def _frame_table(episode: Episode, frames: pa.Table, fps: float, tasks: dict[int, str]) -> pa.Table:
    """The episode's rows of ``frames`` plus ``task`` and one clip column per camera."""
    table = frames.filter(pc.equal(frames.column("episode_index"), episode.index))
    if table.num_rows != episode.length:
        raise ValueError(
            f"read_lerobot {episode.data_url}: episode {episode.index} has {table.num_rows} frame "
            f"rows but meta/episodes says length={episode.length}; the dataset is incomplete or "
            "was not finalized"
        )
    if "task_index" in table.column_names and "task" not in table.column_names and tasks:
        names = [tasks.get(i) for i in table.column("task_index").to_pylist()]
        table = table.append_column("task", pa.array(names, pa.string()))
    times = table.column("timestamp").to_pylist()
    for key, video in episode.videos:
        starts = [video.from_timestamp + float(t) for t in times]
        field, values = _clip_column(
            key, [video.url] * len(times), starts, [s + 1.0 / fps for s in starts]
        )
        table = table.append_column(field, values)
    return table

"""Frame rows (``read_lerobot(root)``'s shape: one row per frame) gathered into episode rows.

Consecutive rows with one ``episode_index`` make an episode: its ``tasks`` are its frames'
``task`` values (in order of first use), every other column becomes a per-frame list, and a
camera's per-frame clips, which must follow each other in one video, become one clip from
the first frame's start to the last one's end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from .episodes import COMPUTED, is_clip


def is_frame_rows(schema: pa.Schema) -> bool:
    """Whether rows are frames: an ``episode_index`` per row and no ``tasks`` list."""
    return (
        "tasks" not in schema.names
        and "episode_index" in schema.names
        and not (pa.types.is_list(schema.field("episode_index").type))
    )


class FrameGrouper:
    """Takes frame blocks in order; yields one-row episode tables as episodes complete."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.pending: list[pa.Table] = []

    def add(self, table: pa.Table) -> Iterator[pa.Table]:
        episodes = table.column("episode_index").to_numpy(zero_copy_only=False)
        start = 0
        for row in range(1, len(episodes) + 1):
            if row == len(episodes) or episodes[row] != episodes[start]:
                part = table.slice(start, row - start)
                if self.pending and self._episode_of(self.pending[0]) != episodes[start]:
                    yield self._flush()
                self.pending.append(part)
                start = row

    def close(self) -> Iterator[pa.Table]:
        if self.pending:
            yield self._flush()

    @staticmethod
    def _episode_of(table: pa.Table) -> int:
        return table.column("episode_index")[0].as_py()

    def _flush(self) -> pa.Table:
        frames = pa.concat_tables(self.pending)
        self.pending = []
        episode = self._episode_of(frames)
        where = f"{self.where} episode_index {episode}"
        if "task" not in frames.column_names:
            raise ValueError(
                f"{where}: frame rows need a 'task' column (the frame's task text) to make "
                "the episode's tasks; add one with .map"
            )
        columns: dict[str, pa.Array] = {
            "tasks": pa.array([list(dict.fromkeys(frames.column("task").to_pylist()))]),
        }
        offsets = pa.array([0, frames.num_rows], pa.int32())
        for field in frames.schema:
            name = field.name
            if name in COMPUTED:
                continue
            values = frames.column(name).combine_chunks()
            if is_clip(field.type):
                columns[name] = _joined_clip(values, f"{where} camera {name!r}")
            else:
                columns[name] = pa.ListArray.from_arrays(offsets, values)
        return pa.table(columns)


def _joined_clip(clips: pa.StructArray, where: str) -> pa.StructArray:
    """The frames' clips as one: same file, each starting where the previous one ends."""
    paths = pc.unique(clips.field("path")).to_pylist()
    if len(paths) != 1:
        raise ValueError(
            f"{where}: the frames' clips lie in {len(paths)} files ({paths[:3]}); an episode's "
            "frames must be one time range of one video"
        )
    starts = clips.field("from_timestamp").to_numpy(zero_copy_only=False)
    stops = clips.field("to_timestamp").to_numpy(zero_copy_only=False)
    gaps = [i for i in range(1, len(starts)) if abs(starts[i] - stops[i - 1]) > 1e-4]
    if gaps:
        raise ValueError(
            f"{where}: frame {gaps[0]}'s clip starts at {starts[gaps[0]]:g}s but the frame "
            f"before ends at {stops[gaps[0] - 1]:g}s; an episode's frames must follow each other"
        )
    return pa.array(
        [{"path": paths[0], "from_timestamp": float(starts[0]), "to_timestamp": float(stops[-1])}]
    )

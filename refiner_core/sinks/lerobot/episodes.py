"""The episode rows ``write_lerobot`` takes, and the frame table each one becomes.

One row per episode:

- ``tasks``: ``list<string>``, the episode's tasks (at least one);
- one ``video_clip`` column per camera (a struct with ``path``, ``from_timestamp`` and
  ``to_timestamp``; the column name is the camera's feature key);
- the frame data: every other column is a list with one value per frame (a number, or a
  fixed-length vector), all of the episode's length. ``timestamp`` (seconds from the
  episode's start; default ``frame_index / fps``) and ``task`` (a task per frame; default
  the first of ``tasks``) are optional frame lists;
- optional scalars: ``length`` (checked against the frame lists and clips) and
  ``episode_index`` (ignored: episodes are numbered 0.. in the order written);
- ``stats/<feature>/<name>`` columns: a camera's image statistics are kept when its clip is
  copied unchanged and every key is there (see :mod:`.carried_stats`); the other features'
  are computed again from the frame data.

``read_lerobot(root, rows="episodes")`` gives such rows without frame data; a
``map`` can add the frame lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# Frame columns the writer computes itself; given in a row they are ignored.
COMPUTED = ("frame_index", "episode_index", "index", "task_index")
SCALARS = ("length", "episode_index")
_CLIP_KEYS = {"path", "from_timestamp", "to_timestamp"}


@dataclass(frozen=True)
class RowShape:
    """Which columns of the rows are clips, frame lists and tasks."""

    cameras: tuple[str, ...]
    frame_columns: tuple[str, ...]


def is_clip(dtype: pa.DataType) -> bool:
    return pa.types.is_struct(dtype) and {f.name for f in dtype} >= _CLIP_KEYS


def row_shape(schema: pa.Schema, where: str) -> RowShape:
    """The columns' roles; ``ValueError`` naming a column that fits none and the fix."""
    if "tasks" not in schema.names:
        raise ValueError(
            f"{where}: the rows have no 'tasks' column; give each episode row its tasks as a "
            "list of strings (read_lerobot(..., rows='episodes') rows have it)"
        )
    tasks = schema.field("tasks").type
    if not (pa.types.is_list(tasks) or pa.types.is_large_list(tasks)) or not (
        pa.types.is_string(tasks.value_type) or pa.types.is_large_string(tasks.value_type)
    ):
        raise ValueError(f"{where}: column 'tasks' is {tasks}; it must be a list of strings")
    cameras, frames = [], []
    for field in schema:
        if field.name == "tasks" or field.name in SCALARS or field.name.startswith("stats/"):
            continue  # statistics: see carried_stats
        if is_clip(field.type):
            cameras.append(field.name)
        elif pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            if field.name not in COMPUTED:
                frames.append(field.name)
        else:
            raise ValueError(
                f"{where}: column {field.name!r} is {field.type}, neither a video clip nor a list "
                "with one value per frame; drop it (.map) or make it a per-frame list"
            )
    if not cameras and not frames:
        raise ValueError(f"{where}: the rows have no video clip column and no frame list column")
    return RowShape(tuple(cameras), tuple(frames))


def episode_length(table: pa.Table, row: int, shape: RowShape, where: str) -> int | None:
    """The frame count the row's ``length`` and frame lists agree on (``None``: only the
    clips can tell)."""
    lengths: dict[str, int] = {}
    if "length" in table.column_names and table.column("length")[row].is_valid:
        lengths["length"] = int(table.column("length")[row].as_py())
    for name in shape.frame_columns:
        value = table.column(name)[row]
        if not value.is_valid:
            raise ValueError(f"{where} row {row}: column {name!r} is null; give a list per frame")
        lengths[name] = len(value.values)
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"{where} row {row}: the frame lists disagree on the episode's length: {lengths}; "
            "every frame column needs one value per frame"
        )
    return next(iter(lengths.values()), None)


def frame_table(
    table: pa.Table, row: int, shape: RowShape, length: int, fps: float, where: str
) -> pa.Table:
    """The episode's frames: its frame lists plus ``timestamp``, ``frame_index`` and ``task``
    (``episode_index`` and ``index`` count from 0 in the episode; the commit shifts them)."""
    columns: dict[str, pa.Array] = {}
    for name in shape.frame_columns:
        columns[name] = _per_frame(name, table.column(name)[row].values, where, row)
    if "timestamp" not in columns:
        columns["timestamp"] = pa.array([k / fps for k in range(length)], pa.float32())
    else:
        columns["timestamp"] = pc.cast(columns["timestamp"], pa.float32())
    tasks = table.column("tasks")[row].as_py() or []
    if not tasks:
        raise ValueError(f"{where} row {row}: 'tasks' is empty; give the episode at least a task")
    if "task" not in columns:
        columns["task"] = pa.array([tasks[0]] * length, pa.string())
    columns["frame_index"] = pa.array(range(length), pa.int64())
    return pa.table(columns)


def _per_frame(name: str, values: pa.Array, where: str, row: int) -> pa.Array:
    """Per-frame vectors as fixed-size lists (LeRobot's shape), other values as they are."""
    if not (pa.types.is_list(values.type) or pa.types.is_large_list(values.type)):
        return values
    sizes = set(pc.list_value_length(values).to_pylist())
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            f"{where} row {row}: column {name!r} has frames of lengths {sorted(sizes, key=str)}; "
            "a feature's vectors must all have one length"
        )
    return pa.FixedSizeListArray.from_arrays(values.flatten(), sizes.pop())


def feature_of(field: pa.Field) -> dict[str, Any]:
    """The ``meta/info.json`` feature of a frame column."""
    dtype, shape = field.type, [1]
    if pa.types.is_fixed_size_list(dtype):
        dtype, shape = dtype.value_type, [dtype.list_size]
    name = "string" if pa.types.is_string(dtype) else "bool" if dtype == pa.bool_() else str(dtype)
    if name == "float":
        name = "float32"
    elif name == "double":
        name = "float64"
    return {"dtype": name, "shape": shape, "names": None}

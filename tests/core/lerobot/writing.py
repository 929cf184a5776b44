"""Episode rows for write_lerobot, built from a dataset read_lerobot reads."""

from __future__ import annotations

import pyarrow as pa

import refiner_core as mdr
from tests.core.lerobot.reading import rows_of

FRAME_COLUMNS = ("observation.state", "action", "timestamp", "task")
# the source's types, so the written features keep them (Python floats would be float64)
FRAME_DTYPES = {
    "observation.state": pa.list_(pa.list_(pa.float32())),
    "action": pa.list_(pa.list_(pa.float32())),
    "timestamp": pa.list_(pa.float32()),
    "task": pa.list_(pa.string()),
}


def frames_by_episode(root: str, **read: object) -> dict[int, dict[str, list]]:
    """Per episode of the dataset at ``root``, its frame columns as lists."""
    episodes: dict[int, dict[str, list]] = {}
    for row in rows_of(mdr.read_lerobot(root, **read)):
        lists = episodes.setdefault(row["episode_index"], {c: [] for c in FRAME_COLUMNS})
        for column in FRAME_COLUMNS:
            lists[column].append(row[column])
    return episodes


def episode_rows(root: str, **read: object) -> mdr.Pipeline:
    """``read_lerobot(root, rows="episodes")`` with each episode's frame data added."""
    options = read.get("storage_options")
    frames = frames_by_episode(root, storage_options=options)
    return mdr.read_lerobot(root, rows="episodes", **read).map(
        lambda row: frames[row.episode_index], dtypes=FRAME_DTYPES
    )

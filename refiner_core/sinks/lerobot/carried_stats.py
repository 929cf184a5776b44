"""A camera's image statistics as an episode row carries them (``stats/<camera>/<name>``).

``read_lerobot(root, rows="episodes")`` gives each episode's statistics as the source
dataset keeps them. When a clip's packets are copied unchanged, its frames are the source's
and so are their statistics: the writer takes them instead of decoding the clip again, as
LeRobot does when it converts a dataset from v2.1 to v3.0.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from .stats import QUANTILES, Stats

# What the writer stores for an image feature; a row missing any of them is recomputed.
IMAGE_STAT_KEYS = ("min", "max", "mean", "std", *QUANTILES, "count")
IMAGE_STAT_SHAPE = (3, 1, 1)


def carried_image_stats(table: pa.Table, row: int, camera: str, where: str) -> Stats | None:
    """``camera``'s statistics from row ``row`` of ``table``, or ``None`` when the row does
    not carry every key (then they are computed from the frames); ``ValueError`` naming the
    episode, camera and key when a carried value has the wrong shape."""
    values: Stats = {}
    for key in IMAGE_STAT_KEYS:
        column = f"stats/{camera}/{key}"
        if column not in table.column_names:
            return None
        value = table.column(column)[row].as_py()
        if value is None:
            return None
        values[key] = value
    for key in IMAGE_STAT_KEYS:
        _check(values[key], key, f"{where}: statistic 'stats/{camera}/{key}'")
    return values


def _check(value: Any, key: str, what: str) -> None:
    if key == "count":
        if not (
            isinstance(value, list)
            and len(value) == 1
            and _is_number(value[0])
            and value[0] > 0
            and float(value[0]).is_integer()
        ):
            raise ValueError(
                f"{what} is {value!r}; it must be a list of one positive count, like [300]. "
                "Fix or drop the stats/ columns, or pass recompute_stats=True"
            )
        return
    if _shape(value) != IMAGE_STAT_SHAPE:
        raise ValueError(
            f"{what} has shape {_shape(value)}, not {IMAGE_STAT_SHAPE} (one finite value per "
            "channel, as LeRobot stores images' statistics). Fix or drop the stats/ columns, "
            "or pass recompute_stats=True"
        )


def _shape(value: Any) -> tuple[int, ...] | str:
    """The nested lists' shape, or a word saying why they have none."""
    if _is_number(value):
        return () if math.isfinite(float(value)) else "a non-finite number"
    if not isinstance(value, list) or not value:
        return f"{type(value).__name__} {value!r}"[:80]
    inner = [_shape(item) for item in value]
    if any(isinstance(s, str) for s in inner) or len(set(inner)) != 1:
        return "ragged or non-numeric lists"
    first = inner[0]
    assert isinstance(first, tuple)
    return (len(value), *first)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

"""Turning callback results into rows, with errors that say what to do instead."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import CallbackResultError
from ..row import Row


def step_label(index: int, kind: str) -> str:
    return f"step {index} ({kind})"


def merge_map_result(row: Row, result: Any, label: str, shard_id: str | None) -> Row:
    """``map``/``map_async`` rule: a Row replaces the input row, a dict is merged into it."""
    if isinstance(result, Row):
        return result
    if isinstance(result, Mapping):
        return row.update(result)
    hint = ""
    if inspect.isawaitable(result):
        hint = " It returned an awaitable: use map_async for async callbacks."
        if inspect.iscoroutine(result):
            result.close()
    raise CallbackResultError(
        f"{label} on shard {shard_id} returned {type(result).__name__}; a map callback must "
        "return a Row (replaces the row) or a dict (merged into the row). To drop rows use "
        f"filter(...), or flat_map(...) returning an empty list.{hint}"
    )


def rows_from_iterable(result: Any, label: str, shard_id: str | None) -> list[Row]:
    """``flat_map``/``batch_map`` rule: an iterable of Rows or dicts."""
    if (
        result is None
        or isinstance(result, (str, bytes, Mapping))
        or not isinstance(result, Iterable)
    ):
        raise CallbackResultError(
            f"{label} on shard {shard_id} returned {type(result).__name__}; it must return an "
            "iterable (list or generator) of Rows or dicts, empty to drop rows"
        )
    rows = []
    for i, item in enumerate(result):
        if isinstance(item, Row):
            rows.append(item)
        elif isinstance(item, Mapping):
            rows.append(Row(item))
        else:
            raise CallbackResultError(
                f"{label} on shard {shard_id} produced item {i} of type {type(item).__name__}; "
                "each item must be a Row or a dict"
            )
    return rows

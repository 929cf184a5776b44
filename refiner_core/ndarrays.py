"""Numpy arrays in row values, as Arrow can hold them.

Arrow builds a list column from 1-D numpy arrays but rejects N-D ones, and a 0-D
array is not a scalar to it. A row returned by a callback often holds both: an
action chunk of shape ``(steps, joints)``, a small image, a reduced value. Here an
N-D array becomes nested lists (``list<list<...>>``, one level per dimension) whose
innermost lists stay 1-D numpy arrays, so Arrow still reads the numbers in bulk; a
0-D array becomes its scalar. Nested lists hold any shape per row and are what
Parquet readers, JSONL and Lance all store.

Example:
    >>> import numpy as np
    >>> image, reward, name = plain_values([np.array([[1, 2], [3, 4]]), np.array(7.5), "x"])
    >>> [row.tolist() for row in image], float(reward), name
    ([[1, 2], [3, 4]], 7.5, 'x')
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def plain_values(values: list[Any]) -> list[Any]:
    """``values`` with every N-D numpy array (also inside lists and mappings) turned into
    nested lists and every 0-D array into its scalar; ``values`` itself when none was found."""
    numpy = sys.modules.get("numpy")
    if numpy is None:  # no value can be a numpy array if numpy was never imported
        return values
    return _plain_list(values, numpy.ndarray)


def _plain_list(values: list[Any] | tuple[Any, ...], ndarray: type) -> Any:
    out: list[Any] | None = None
    for i, value in enumerate(values):
        plain = _plain(value, ndarray)
        if plain is not value:
            if out is None:
                out = list(values)
            out[i] = plain
    return values if out is None else out


def _plain(value: Any, ndarray: type) -> Any:
    if isinstance(value, ndarray):
        if value.ndim == 0:
            return value[()]
        if value.ndim == 1:
            return _plain_list(value, ndarray) if value.dtype == object else value
        return [_plain(part, ndarray) for part in value]
    if isinstance(value, (list, tuple)):
        return _plain_list(value, ndarray)
    if isinstance(value, Mapping):
        changed = {k: _plain(v, ndarray) for k, v in value.items()}
        if any(changed[k] is not v for k, v in value.items()):
            return changed
    return value

"""Numpy arrays in row values, as Arrow can hold them.

Arrow builds a list column from 1-D numpy arrays but rejects N-D ones, and a 0-D
array is not a scalar to it. A row returned by a callback often holds both: an
action chunk of shape ``(steps, joints)``, a small image, a reduced value. Here an
N-D array becomes nested lists (``list<list<...>>``, one level per dimension) of
its own element type; a 0-D array becomes its scalar. Nested lists hold any shape
per row and are what Parquet readers, JSONL and Lance all store.

A column whose cells are all N-D arrays of one dtype and rank is built in one go
from the arrays' memory (:func:`nested_list_array`); other values are walked
(:func:`plain_values`), their innermost lists left as 1-D arrays Arrow reads in bulk.

Example:
    >>> import numpy as np
    >>> image, reward, name = plain_values([np.array([[1, 2], [3, 4]]), np.array(7.5), "x"])
    >>> [row.tolist() for row in image], float(reward), name
    ([[1, 2], [3, 4]], 7.5, 'x')
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # numpy is imported at run time only by callers that make arrays
    from numpy import ndarray as NDArray

_MAX_OFFSET = 2**31 - 1  # list offsets are int32


def nested_list_array(values: list[Any]) -> pa.Array | None:
    """The nested list column of ``values`` when each is ``None`` or an N-D numpy array
    (N >= 2), all of one dtype and rank; ``None`` when they are anything else.

    Example:
        >>> import numpy as np
        >>> column = nested_list_array([np.zeros((1, 2), np.float32), None])
        >>> column.type, column.to_pylist()
        (ListType(list<item: list<item: float>>), [[[0.0, 0.0]], None])
    """
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return None
    arrays = _uniform_arrays(numpy, values)
    if arrays is None:
        return None
    first = arrays[0]
    shapes = numpy.array([v.shape for v in arrays], dtype=numpy.int64)
    column = pa.array(numpy.concatenate([v.reshape(-1) for v in arrays]))
    for level in range(first.ndim - 1, 0, -1):  # innermost lists first
        lengths = numpy.repeat(shapes[:, level], shapes[:, :level].prod(axis=1))
        column = pa.ListArray.from_arrays(_offsets(numpy, lengths), column)
    missing = numpy.array([v is None for v in values], dtype=bool)
    lengths = numpy.zeros(len(values), dtype=numpy.int64)
    lengths[~missing] = shapes[:, 0]
    mask = pa.array(missing) if missing.any() else None
    return pa.ListArray.from_arrays(_offsets(numpy, lengths), column, mask=mask)


def _uniform_arrays(numpy: Any, values: list[Any]) -> list[Any] | None:
    """The non-null ``values`` when all are N-D (N >= 2) arrays of one dtype and rank that
    fit int32 list offsets, else ``None``."""
    first = next((v for v in values if v is not None), None)
    if not isinstance(first, numpy.ndarray) or first.ndim < 2 or first.dtype.kind == "O":
        return None  # the common case, told by one cell
    arrays = [v for v in values if v is not None]
    if not all(isinstance(v, numpy.ndarray) for v in arrays):
        return None
    if any(v.ndim != first.ndim or v.dtype != first.dtype for v in arrays):
        return None
    if sum(v.size for v in arrays) > _MAX_OFFSET:
        return None
    return arrays


def _offsets(numpy: Any, lengths: Any) -> pa.Array:
    offsets = numpy.zeros(len(lengths) + 1, dtype=numpy.int32)
    numpy.cumsum(lengths, out=offsets[1:])
    return pa.array(offsets)


def plain_values(values: list[Any]) -> list[Any]:
    """``values`` with every N-D numpy array (also inside lists and mappings) turned into
    nested lists and every 0-D array into its scalar; ``values`` itself when none was found."""
    numpy = sys.modules.get("numpy")
    if numpy is None:  # no value can be a numpy array if numpy was never imported
        return values
    return _plain_list(values, numpy.ndarray)


def _plain_list(values: Iterable[Any], ndarray: type[NDArray]) -> Any:
    out: list[Any] | None = None
    for i, value in enumerate(values):
        plain = _plain(value, ndarray)
        if plain is not value:
            if out is None:
                out = list(values)
            out[i] = plain
    return values if out is None else out


def _plain(value: Any, ndarray: type[NDArray]) -> Any:
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

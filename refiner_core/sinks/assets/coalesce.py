"""Complete-blob coalescing: find source blobs whose references cover them entirely."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ...io.blob import validate_reference


def covers_exactly(ranges: list[tuple[int, int]], size: int) -> bool:
    """True when the union of ``(offset, size)`` ranges is exactly ``[0, size)`` with no gap."""
    reach = 0
    for offset, length in sorted(ranges):
        if offset > reach:
            return False
        reach = max(reach, offset + length)
    return reach == size


def plan_coalescing(values: list[Any], blob_size: Callable[[str], int]) -> dict[str, int]:
    """Source paths (→ exact size) whose references in ``values`` cover the whole blob.

    ``values`` are the column's cells (``None`` skipped). Any malformed reference
    disables coalescing for the whole column, which then uses per-range copies.
    """
    groups: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for value in values:
        if value is None:
            continue
        try:
            path, offset, size = validate_reference(value)
        except ValueError:
            return {}
        groups[path].append((offset, size))
    whole: dict[str, int] = {}
    for path, ranges in groups.items():
        try:
            size = blob_size(path)
        except Exception:
            continue
        if any(o + s > size for o, s in ranges):
            continue
        if covers_exactly(ranges, size):
            whole[path] = size
    return whole

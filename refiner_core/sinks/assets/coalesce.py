"""Complete-blob coalescing: find source blobs whose references cover them entirely."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ...io.blob import validate_reference


def contiguous_reach(ranges: list[tuple[int, int]]) -> int | None:
    """End of the union of ``(offset, size)`` ranges when it is one run from 0 with no
    gap; ``None`` otherwise.

    >>> contiguous_reach([(4, 6), (0, 5)]), contiguous_reach([(0, 2), (3, 1)])
    (10, None)
    """
    reach = 0
    for offset, length in sorted(ranges):
        if offset > reach:
            return None
        reach = max(reach, offset + length)
    return reach


def coalescing_candidates(values: list[Any]) -> dict[str, int]:
    """Source paths whose references in ``values`` form one run from offset 0, with
    the end of that run: the blob is covered entirely when its size is that end.

    ``values`` are the column's cells (``None`` skipped). Any malformed reference
    disables coalescing for the whole column, which then uses per-range copies.

    >>> refs = [{"path": "a", "offset": 0, "size": 4}, {"path": "b", "offset": 2, "size": 2}]
    >>> coalescing_candidates(refs)
    {'a': 4}
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
    candidates = {path: contiguous_reach(ranges) for path, ranges in groups.items()}
    return {path: reach for path, reach in candidates.items() if reach is not None}

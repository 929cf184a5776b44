"""Which partition a source file triggers: the checks and run keys of :func:`~refiner_dagster.sensors.build_source_sensor`.

A file's partition key is its relative path (one dynamic partition per file) or what
the sensor's ``partition_fn`` maps it to; :func:`partition_problem` says why a key
cannot be used (the sensor then skips the file with that warning), and
:func:`files_run_key` names the one run several files of a partition make together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import dagster as dg

__all__ = ["files_run_key", "partition_problem"]

# Dagster rejects partition keys containing these; such files cannot be partitions.
BAD_PARTITION_PARTS = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")


def partition_problem(
    key: Any, partitions_def: dg.PartitionsDefinition | None, *, mapped: bool
) -> str | None:
    """Why a file's partition ``key`` cannot be used, or ``None``; ``mapped``: the key came
    from ``partition_fn`` (else it is the file's path).

    >>> daily = dg.DailyPartitionsDefinition("2024-01-01")
    >>> partition_problem("notes", daily, mapped=True)[:51]
    "partition_fn gave 'notes', which is not a partition"
    >>> partition_problem("2024-01-02", daily, mapped=True) is None
    True
    """
    what = f"partition_fn gave {key!r}" if mapped else f"its path {key!r}"
    fix = "change partition_fn" if mapped else "rename the file"
    if not isinstance(key, str) or not key:
        return f"{what}, not a partition key (a non-empty string); {fix}"
    if any(p in key for p in BAD_PARTITION_PARTS):
        return (
            f"{what}, which cannot be a Dagster partition key (it contains '...' or a "
            f"control character); {fix}"
        )
    if partitions_def is None or isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return None
    try:
        known = partitions_def.has_partition_key(key)
    except Exception:  # e.g. a time partition key in another date format
        known = False
    if not known:
        return (
            f"{what}, which is not a partition of the asset's "
            f"{type(partitions_def).__name__} (e.g. {partitions_def.get_first_partition_key()!r}); "
            f"{fix}, or touch the file once its partition exists"
        )
    return None


def files_run_key(partition_key: str, run_keys: Sequence[str]) -> str:
    """The run key of one run for several files of a partition: the same files at the
    same versions give the same key, any change a new one.

    >>> files_run_key("2024-01-02", ["a@v1", "b@v1"]) == files_run_key("2024-01-02", ["b@v1", "a@v1"])
    True
    """
    digest = hashlib.sha256("\n".join(sorted(run_keys)).encode()).hexdigest()[:16]
    return f"{partition_key}@{len(run_keys)}-files-{digest}"

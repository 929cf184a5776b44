"""One partition of a multi-partition step, seen as a single-partition step context.

A fan-out dataset asset calls the user's ``fn(context)`` once per partition. When a
run covers a partition range (a single-run backfill), the step's own context has no
single ``partition_key``; :func:`partition_view` hands ``fn`` a view of it that
answers ``partition_key``, ``partition_keys``, ``partition_key_range`` and (on time
partitions) ``partition_time_window`` for one partition, and everything else
(``resources``, ``log``, ``run_id`` ...) from the step.

Example:
    >>> import dagster as dg
    >>> daily = dg.DailyPartitionsDefinition(start_date="2024-01-01")
    >>> view = PartitionView(object(), "2024-01-02", daily)
    >>> view.partition_key, view.partition_time_window.end.day
    ('2024-01-02', 3)
"""

from __future__ import annotations

from typing import Any, cast

import dagster as dg


class PartitionView:
    """``context`` as if its run had targeted ``partition_key`` alone."""

    def __init__(
        self, context: Any, partition_key: str, partitions_def: dg.PartitionsDefinition | None
    ) -> None:
        self._context = context
        self._partition_key = partition_key
        self._partitions_def = partitions_def

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def __repr__(self) -> str:
        return f"PartitionView({self._partition_key!r} of {self._context!r})"

    @property
    def partition_key(self) -> str:
        return self._partition_key

    @property
    def has_partition_key(self) -> bool:
        return True

    @property
    def partition_keys(self) -> list[str]:
        return [self._partition_key]

    @property
    def has_partition_key_range(self) -> bool:
        return True

    @property
    def partition_key_range(self) -> dg.PartitionKeyRange:
        return dg.PartitionKeyRange(self._partition_key, self._partition_key)

    @property
    def partition_time_window(self) -> dg.TimeWindow:
        if not isinstance(self._partitions_def, dg.TimeWindowPartitionsDefinition):
            raise ValueError(
                f"partition {self._partition_key!r} has no time window: the asset's partitions "
                f"are {type(self._partitions_def).__name__}, not time-window partitions"
            )
        return self._partitions_def.time_window_for_partition_key(self._partition_key)

    def asset_partition_key_for_output(self, output_name: str = "result") -> str:
        return self._partition_key


def partition_view(
    context: dg.OpExecutionContext,
    partition_key: str | None,
    partitions_def: dg.PartitionsDefinition | None,
) -> dg.OpExecutionContext:
    """The context to build ``partition_key``'s pipeline with: the step's own when it
    targets that partition alone (or no partition), else a :class:`PartitionView`."""
    if partition_key is None or (
        context.has_partition_key and context.partition_key == partition_key
    ):
        return context
    return cast(dg.OpExecutionContext, PartitionView(context, partition_key, partitions_def))


__all__ = ["PartitionView", "partition_view"]

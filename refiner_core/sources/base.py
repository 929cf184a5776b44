"""The source protocol: plan shards, then read one shard as blocks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from ..row import Row

MAX_SHARDS = 10_000
DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024

Block = pa.Table | list[Row]


@dataclass(frozen=True)
class Shard:
    """One unit of work: a slice of the source that one worker reads.

    ``id`` is a zero-padded index (``"00042"``); ``payload`` is whatever the source
    needs to read it (files and row groups, a byte range, items). Shards are small
    and picklable so they can travel between processes and Dagster steps.
    """

    id: str
    payload: Any = None

    @property
    def index(self) -> int:
        return int(self.id)


def shard_id(index: int) -> str:
    return f"{index:05d}"


def make_shards(payloads: list[Any], *, source: str) -> list[Shard]:
    """Number payloads as shards, enforcing the per-plan shard limit."""
    if len(payloads) > MAX_SHARDS:
        raise ValueError(
            f"{source} planned {len(payloads)} shards, over the limit of {MAX_SHARDS} shards per "
            "plan; raise target_shard_bytes or pass a smaller num_shards"
        )
    return [Shard(shard_id(i), p) for i, p in enumerate(payloads)]


def check_num_shards(num_shards: int | None) -> None:
    if num_shards is not None and (
        isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards <= 0
    ):
        raise ValueError(f"num_shards must be a positive integer, got {num_shards!r}")
    if num_shards is not None and num_shards > MAX_SHARDS:
        raise ValueError(f"num_shards={num_shards} is over the limit of {MAX_SHARDS} shards")


def check_columns(columns: Any) -> None:
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns must be a list of column names, got {columns!r}")


def check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class Source(Protocol):
    """What a source implements. Register new ones in ``refiner_core.sources``."""

    name: str

    def plan(self) -> list[Shard]:
        """List the shards; called when a stage starts, not when the pipeline is built."""

    def read(self, shard: Shard) -> Iterator[Block]:
        """Yield the shard's blocks: Arrow tables or lists of rows."""

    def schema_hint(self) -> pa.Schema | None:
        """Known column types (with asset marks), or ``None``."""

"""Running one shard of a pipeline: source blocks through every step, as an async stream."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..blocks import (
    DEFAULT_ARROW_BLOCK_ROWS,
    DEFAULT_ROW_BLOCK_ROWS,
    DEFAULT_VECTORIZED_BLOCK_BYTES,
    split_rows,
    split_table,
    table_to_rows,
)
from ..errors import CallbackResultError
from ..row import Row
from ..sources.base import Block
from .worker import WorkerContext


@dataclass
class StepCounter:
    index: int
    kind: str
    rows_in: int = 0
    rows_out: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
        }


@dataclass
class ShardCounters:
    rows_read: int = 0
    steps: list[StepCounter] = field(default_factory=list)


@dataclass
class ShardContext:
    """What a step sees of the run: the shard id and the worker's callbacks."""

    shard_id: str
    worker: WorkerContext

    def callback(self, step: Any) -> Any:
        """The step's callback; a failing factory fails the shard naming the step."""
        try:
            return self.worker.callback(step)
        except CallbackResultError:
            raise
        except Exception as exc:
            raise step.fail(exc, self.shard_id) from exc


def row_block_cap(pipeline: Any) -> int:
    return pipeline.max_block_rows or DEFAULT_ROW_BLOCK_ROWS


async def _source_blocks(
    pipeline: Any, shard: Any, counters: ShardCounters, arrow_block_rows: int | None
) -> AsyncGenerator[Block, None]:
    row_cap = row_block_cap(pipeline)
    arrow_cap = pipeline.max_block_rows or arrow_block_rows or DEFAULT_ARROW_BLOCK_ROWS
    byte_cap = pipeline.max_vectorized_block_bytes or DEFAULT_VECTORIZED_BLOCK_BYTES
    batch_rows = row_cap if pipeline.steps else arrow_cap
    for block in pipeline.source.read(shard, batch_rows=batch_rows, batch_bytes=byte_cap):
        if isinstance(block, pa.Table):
            for piece in split_table(block, arrow_cap, byte_cap):
                counters.rows_read += piece.num_rows
                yield piece
        else:
            for piece in split_rows(block, row_cap):
                counters.rows_read += len(piece)
                yield piece


async def _as_rows(blocks: AsyncIterator[Block], row_cap: int) -> AsyncGenerator[list[Row], None]:
    async for block in blocks:
        if isinstance(block, pa.Table):
            for piece in split_table(block, row_cap, None):
                yield table_to_rows(piece)
        else:
            yield block


async def _counted_input(
    blocks: AsyncIterator[list[Row]], counter: StepCounter
) -> AsyncGenerator[list[Row], None]:
    async for block in blocks:
        counter.rows_in += len(block)
        yield block


async def _capped_output(
    blocks: AsyncIterator[list[Row]], counter: StepCounter, row_cap: int
) -> AsyncGenerator[list[Row], None]:
    async for block in blocks:
        counter.rows_out += len(block)
        for piece in split_rows(block, row_cap):
            yield piece


def shard_blocks(
    pipeline: Any,
    shard: Any,
    ctx: ShardContext,
    counters: ShardCounters,
    arrow_block_rows: int | None = None,
) -> AsyncGenerator[Block, None]:
    """The async block stream of ``shard``: Arrow tables when no step needs rows, of at
    most ``arrow_block_rows`` rows (a sink's preference; ``with_max_block_rows`` wins)."""
    source = _source_blocks(pipeline, shard, counters, arrow_block_rows)
    if not pipeline.steps:
        return source
    row_cap = row_block_cap(pipeline)
    rows: AsyncGenerator[list[Row], None] = _as_rows(source, row_cap)
    for step in pipeline.steps:
        counter = StepCounter(step.index, step.kind)
        counters.steps.append(counter)
        rows = _capped_output(step.run(_counted_input(rows, counter), ctx), counter, row_cap)
    return rows

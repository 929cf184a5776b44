"""Running a pipeline inside the calling process, for ``iter_rows``/``take``/``materialize``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa

from ..blocks import table_to_rows
from ..row import Row
from ..sources.base import Block
from .runner import ShardContext, ShardCounters, shard_blocks
from .worker import WorkerContext


def iter_rows(pipeline: Any) -> Iterator[Row]:
    """Yield every row of ``pipeline``, shard after shard, on one worker context."""
    worker = WorkerContext()
    try:
        for shard in pipeline.plan():
            stream = shard_blocks(pipeline, shard, ShardContext(shard.id, worker), ShardCounters())
            try:
                while True:
                    try:
                        block = worker.run(_next(stream))
                    except StopAsyncIteration:
                        break
                    yield from (table_to_rows(block) if isinstance(block, pa.Table) else block)
            finally:
                worker.run(stream.aclose())
    finally:
        worker.close()


async def _next(stream: AsyncIterator[Block]) -> Block:
    return await anext(stream)

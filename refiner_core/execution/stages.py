"""Sharded stages: a write (pipeline into a sink) or a plain run (pipeline, rows discarded)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .attempts import make_manifest, new_attempt_id, write_manifest
from .blocks import SchemaBuilder
from .runner import ShardContext, ShardCounters, shard_blocks
from .worker import WorkerContext

Progress = Callable[[int, int], None]


class ShardedStage:
    """A stage whose work is split into shards that workers run independently."""

    kind = "run"

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    @property
    def name(self) -> str:
        return f"run {self.pipeline.source.name}"

    def plan(self, run_id: str) -> list[Any]:
        return self.pipeline.plan()

    def run_task(self, shards: list[Any], *, run_id: str) -> list[dict[str, Any]]:
        """Run ``shards`` one after another in this process on one worker context."""
        worker = WorkerContext()
        try:
            return [self.run_shard(shard, run_id=run_id, worker=worker) for shard in shards]
        finally:
            worker.close()

    def run_shard(
        self,
        shard: Any,
        *,
        run_id: str,
        worker: WorkerContext,
        progress: Progress | None = None,
        attempt_id: str | None = None,
        lease: Any = None,
    ) -> dict[str, Any]:
        """Run one attempt of ``shard`` and persist its manifest.

        With a ``lease`` (the launcher's ownership of the output folder), the manifest
        is only written while the lease holds; otherwise the attempt's files are
        removed and :class:`~refiner_core.io.ownership.OwnershipLost` is raised.
        """
        attempt_id = attempt_id or new_attempt_id()
        started = time.time()
        counters = ShardCounters()
        written = worker.run(self._execute(shard, attempt_id, run_id, worker, counters, progress))
        totals = {"rows_read": counters.rows_read, **written.get("counters", {})}
        manifest = make_manifest(
            run_id=run_id,
            shard_id=shard.id,
            attempt_id=attempt_id,
            started_at=started,
            written=written,
            counters=totals,
            steps=[c.to_dict() for c in counters.steps],
        )
        if lease is not None:
            try:
                lease.check()
            except BaseException:
                self.discard(manifest)
                raise
        self.persist(manifest)
        return manifest

    def persist(self, manifest: dict[str, Any]) -> None:
        """Plain runs keep manifests in memory only."""

    def discard(self, manifest: dict[str, Any]) -> None:
        """Remove what an attempt wrote (plain runs write nothing)."""

    async def _execute(
        self, shard, attempt_id, run_id, worker, counters, progress
    ) -> dict[str, Any]:
        rows = 0
        async for block in shard_blocks(
            self.pipeline, shard, ShardContext(shard.id, worker), counters
        ):
            n = block.num_rows if isinstance(block, pa.Table) else len(block)
            rows += n
            if progress is not None:
                progress(n, 0)
        return {"counters": {"rows_written": rows}}


class WriteStage(ShardedStage):
    """Stage 0 of a writer's sequence: each shard attempt writes its files and a manifest."""

    kind = "write"

    def __init__(self, pipeline: Any, sink: Any) -> None:
        super().__init__(pipeline)
        self.sink = sink

    @property
    def name(self) -> str:
        return self.sink.describe()

    def plan(self, run_id: str) -> list[Any]:
        shards = self.pipeline.plan()
        self.sink.prepare(run_id)
        return shards

    def persist(self, manifest: dict[str, Any]) -> None:
        write_manifest(self.sink.folder, manifest)

    def discard(self, manifest: dict[str, Any]) -> None:
        for relative in [*manifest.get("files", []), *manifest.get("asset_dirs", [])]:
            self.sink.folder.rm(relative, recursive=True)

    async def _execute(
        self, shard, attempt_id, run_id, worker, counters, progress
    ) -> dict[str, Any]:
        builder = SchemaBuilder(self.pipeline.declared_fields(), self.pipeline.source.schema_hint())
        writer = self.sink.open_attempt(shard.id, attempt_id, run_id)
        rows = 0
        try:
            async for block in shard_blocks(
                self.pipeline,
                shard,
                ShardContext(shard.id, worker),
                counters,
                self.sink.arrow_block_rows,
            ):
                if isinstance(block, pa.Table):
                    table = block
                else:
                    table = builder.to_table(block, shard_id=shard.id, first_row=rows)
                rows += table.num_rows
                await writer.write(table)
                if progress is not None:
                    progress(table.num_rows, table.nbytes)
            return await writer.close()
        except BaseException:
            await writer.abort()
            raise

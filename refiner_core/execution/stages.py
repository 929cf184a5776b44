"""Sharded stages: a write (pipeline into a sink) or a plain run (pipeline, rows discarded)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..blocks import SchemaBuilder
from ..io.open_uploads import record_failed_aborts
from ..manifests import AttemptManifest, AttemptResult, write_manifest
from ..manifests._attempts import attempt_key, new_attempt_id
from ..sources.arrow_cast import schema_with_fields
from .declared import check_declared, declarations, only_filters
from .runner import ShardContext, ShardCounters, shard_blocks
from .worker import WorkerContext

if TYPE_CHECKING:
    from ..sinks.protocol import AttemptWriter, Sink

Progress = Callable[[int, int], None]


class ShardedStage:
    """A stage whose work is split into shards that workers run independently."""

    kind = "run"

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    @property
    def name(self) -> str:
        return f"run {self.pipeline.source.name}"

    def plan(self, run_id: str, workers: int = 1) -> list[Any]:
        """The stage's shards, for ``workers`` processes sharing them."""
        return self.pipeline.plan(workers=workers)

    def run_task(
        self, shards: list[Any], *, run_id: str, attempt_id: str | None = None
    ) -> list[AttemptManifest]:
        """Run ``shards`` one after another in this process on one worker context.

        ``attempt_id`` (12 hex digits) names every shard's attempt, for callers whose
        attempt is a retry they can number; default: a new id per shard."""
        worker = WorkerContext()
        try:
            return [
                self.run_shard(shard, run_id=run_id, worker=worker, attempt_id=attempt_id)
                for shard in shards
            ]
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
    ) -> AttemptManifest:
        """Run one attempt of ``shard`` and persist its manifest.

        With a ``lease`` (the launcher's ownership of the output folder), the manifest
        is only written while the lease holds; otherwise the attempt's files are
        removed and :class:`~refiner_core.io.ownership.OwnershipLost` is raised.
        """
        attempt_id = attempt_id or new_attempt_id()
        started = time.time()
        counters = ShardCounters()
        written = worker.run(self._execute(shard, attempt_id, run_id, worker, counters, progress))
        manifest = written.manifest(
            run_id=run_id,
            shard_id=shard.id,
            attempt_id=attempt_id,
            started_at=started,
            rows_read=counters.rows_read,
            steps=tuple(c.to_dict() for c in counters.steps),
        )
        if lease is not None:
            try:
                lease.check()
            except BaseException:
                self.discard(manifest)
                raise
        self.persist(manifest)
        return manifest

    def persist(self, manifest: AttemptManifest) -> None:
        """Plain runs keep manifests in memory only."""

    def discard(self, manifest: AttemptManifest) -> None:
        """Remove what an attempt wrote (plain runs write nothing)."""

    async def _execute(
        self, shard, attempt_id, run_id, worker, counters, progress
    ) -> AttemptResult:
        rows = 0
        async for block in shard_blocks(
            self.pipeline, shard, ShardContext(shard.id, worker), counters
        ):
            n = block.num_rows if isinstance(block, pa.Table) else len(block)
            rows += n
            if progress is not None:
                progress(n, 0)
        return AttemptResult(counters={"rows_written": rows})


class WriteStage(ShardedStage):
    """Stage 0 of a writer's sequence: each shard attempt writes its files and a manifest."""

    kind = "write"

    def __init__(self, pipeline: Any, sink: Sink) -> None:
        super().__init__(pipeline)
        self.sink = sink

    @property
    def name(self) -> str:
        return self.sink.describe()

    def plan(self, run_id: str, workers: int = 1) -> list[Any]:
        shards = self.pipeline.plan(workers=workers)
        self.sink.prepare(run_id)
        return shards

    def persist(self, manifest: AttemptManifest) -> None:
        write_manifest(self.sink.folder, manifest)

    def discard(self, manifest: AttemptManifest) -> None:
        for relative in [*manifest.files, *manifest.asset_dirs]:
            self.sink.folder.rm(relative, recursive=True)

    async def _execute(
        self, shard, attempt_id, run_id, worker, counters, progress
    ) -> AttemptResult:
        builder = SchemaBuilder(self.pipeline.declared_fields(), self.pipeline.source.schema_hint())
        writer = self.sink.open_attempt(shard.id, attempt_id, run_id)
        try:
            return await self._write_rows(shard, worker, counters, progress, builder, writer)
        finally:
            record_failed_aborts(self.sink.folder, attempt_key(shard.id, attempt_id))

    async def _write_rows(
        self, shard, worker, counters, progress, builder, writer: AttemptWriter
    ) -> AttemptResult:
        """Stream the shard's blocks into ``writer``; abort it on any failure.

        The first rows' columns are the attempt's: every ``dtypes=`` entry must be
        among them (:mod:`refiner_core.execution.declared`)."""
        rows = 0
        declared = declarations(self.pipeline)
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
                if rows == 0 and table.num_rows:
                    check_declared(
                        declared,
                        table.column_names,
                        where=f"{self.sink.describe()} shard {shard.id}",
                        present_as="the columns of the shard's rows",
                    )
                rows += table.num_rows
                await writer.write(table)
                if progress is not None:
                    progress(table.num_rows, table.nbytes)
            if rows == 0 and writer.empty_schema is None:
                writer.empty_schema = _known_output_schema(self.pipeline)
            return await writer.close()
        except BaseException:
            await writer.abort()
            raise


def _known_output_schema(pipeline: Any) -> pa.Schema | None:
    """The columns a pipeline's rows have without seeing one: the source's (with declared
    dtypes) when every step only filters; ``None`` when a step may change them."""
    if not only_filters(pipeline):
        return None
    hint = pipeline.source.schema_hint()
    if hint is None:
        return None
    return schema_with_fields(hint, pipeline.declared_fields())

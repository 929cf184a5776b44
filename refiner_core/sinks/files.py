"""What sinks share: ``FolderSink`` (an output folder, its assets, finalization) and, for
Parquet and JSONL, ``FileSink`` (one data file per shard attempt, created lazily)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from typing import Any

import pyarrow as pa

from ..blocks import conform
from ..datatype import asset_of, with_asset_form
from ..io.datafile import DataFolder
from ..manifests import LAYOUT_PATH, AttemptManifest, attempt_key
from .assets import make_asset_writer, resolve_assets_argument
from .empty_result import EMPTY_SCHEMA_KEY, schema_to_text
from .template import FilenameTemplate

MAX_PENDING_BLOCKS = 4


class FolderSink:
    """Base of sinks that write into one output folder (a :class:`~refiner_core.sinks.Sink`).

    It holds the output folder and the ``assets=`` config, records the layout readers
    rely on, and appends the finalization stage; subclasses give ``format`` and
    ``open_attempt``.
    """

    format = "files"
    # Rows per Arrow block this sink prefers from a pipeline without row steps; None
    # takes the engine's default.
    arrow_block_rows: int | None = None
    # File name endings the format's reader picks up in a folder.
    read_suffixes: tuple[str, ...] = ()
    # One run at a time owns the output folder (see refiner_core.io.ownership), as
    # finalization deletes what other runs left in it.
    exclusive_owner = True

    def __init__(
        self,
        output: str,
        *,
        assets: Any = None,
        storage_options: dict[str, Any] | None = None,
        **legacy: Any,
    ) -> None:
        self.assets = resolve_assets_argument(assets, legacy, writer=f"write_{self.format}")
        self.folder = DataFolder(output, storage_options)

    @property
    def url(self) -> str:
        return self.folder.url

    def describe(self) -> str:
        return f"write_{self.format} {self.url}"

    def prepare(self, run_id: str) -> None:
        """Called once before the first attempt: records the layout readers rely on."""
        layout = {
            "format": self.format,
            "asset_subdirs": [self.assets.subdir] if self.assets else [],
        }
        self.folder.write_bytes(LAYOUT_PATH, json.dumps(layout).encode())

    def open_attempt(self, shard_id: str, attempt_id: str, run_id: str) -> Any:  # pragma: no cover
        raise NotImplementedError

    def finalize_stages(self) -> list[Any]:
        from .finalize import FinalizeStage

        return [FinalizeStage(self)]

    def commit(self, committed: list[AttemptManifest], run_id: str) -> dict[str, Any]:
        """Hook for sinks that need a commit (Lance); plain files are visible already."""
        return {}

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise when this format cannot store ``schema``."""


class FileSink(FolderSink):
    """Base of table-file sinks; subclasses give ``extension`` and ``open_table_writer``.

    Each shard attempt writes one file named by ``filename_template`` (default
    ``{shard}__{attempt}.<extension>``).
    """

    extension = ""

    def __init__(
        self, output: str, *, filename_template: str | None = None, **options: Any
    ) -> None:
        super().__init__(output, **options)
        self.template = FilenameTemplate(
            f"{{shard}}__{{attempt}}.{self.extension}"
            if filename_template is None
            else filename_template
        )
        if filename_template is not None:
            self.template.check_readable(
                suffixes=self.read_suffixes or (f".{self.extension}",),
                asset_subdir=self.assets.subdir if self.assets else None,
            )

    def open_attempt(self, shard_id: str, attempt_id: str, run_id: str) -> FileAttemptWriter:
        return FileAttemptWriter(self, shard_id, attempt_id)

    def open_table_writer(self, file: Any, schema: pa.Schema) -> Any:  # pragma: no cover
        raise NotImplementedError


class FileAttemptWriter:
    """Writes one shard attempt: assets first, then the data file that points at them."""

    def __init__(self, sink: FolderSink, shard_id: str, attempt_id: str) -> None:
        self.sink = sink
        self.shard_id = shard_id
        self.attempt_id = attempt_id
        self.relative = self.data_file()
        self.assets = make_asset_writer(sink.assets, sink.folder, attempt_key(shard_id, attempt_id))
        self._stack = contextlib.ExitStack()
        self._file: Any = None
        self._writer: Any = None
        self._schema: pa.Schema | None = None
        self.rows_written = 0
        self.rows_seen = 0
        # The columns of an attempt that wrote no rows, when known (see empty_result).
        self.empty_schema: pa.Schema | None = None
        self._pending: collections.deque[asyncio.Future] = collections.deque()

    def data_file(self) -> str:
        """The attempt's data file, relative to the output folder."""
        return self.sink.template.format(self.shard_id, self.attempt_id)

    @property
    def where(self) -> str:
        return f"{self.sink.describe()} shard {self.shard_id}"

    async def write(self, table: pa.Table) -> None:
        """Queue ``table``; its assets are copied while later blocks arrive, rows land in order."""
        if self.assets is None:
            self._write_table(table)
            return
        first_row = self.rows_seen
        self.rows_seen += table.num_rows
        self._pending.append(
            asyncio.ensure_future(
                self.assets.process(table, shard_id=self.shard_id, first_row=first_row)
            )
        )
        while self._pending and (
            self._pending[0].done() or len(self._pending) > MAX_PENDING_BLOCKS
        ):
            for ready in await self._pending.popleft():
                self._write_table(ready)

    def _write_table(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            if table.num_columns and self.empty_schema is None:
                self.empty_schema = table.schema
            return
        if self._schema is None:
            self._schema = self._open(table.schema)
        table = conform(table, self._schema, where=self.where)
        self._put(table)
        self.rows_written += table.num_rows

    def _open(self, schema: pa.Schema) -> pa.Schema:
        """Open the output for the first block's ``schema``; returns the schema every
        block is conformed to."""
        self.sink.check_schema(schema)
        self._file = self._stack.enter_context(self.sink.folder.open_atomic(self.relative))
        self._writer = self.sink.open_table_writer(self._file, schema)
        return schema

    def _output_schema(self, schema: pa.Schema) -> pa.Schema:
        """``schema`` with its asset columns in the form this attempt's asset writer writes."""
        if self.assets is None:
            return schema
        fields = [
            with_asset_form(f, self.assets.output_form) if asset_of(f) is not None else f
            for f in schema
        ]
        return pa.schema(fields, metadata=schema.metadata)

    def _put(self, table: pa.Table) -> None:
        self._writer.write(table)

    async def close(self) -> dict[str, Any]:
        written: dict[str, Any] = {"files": [], "asset_dirs": [], "counters": {}}
        if self.assets is not None:
            while self._pending:
                for ready in await self._pending.popleft():
                    self._write_table(ready)
            for ready in await self.assets.flush():
                self._write_table(ready)
            asset_result = await self.assets.close()
            written["asset_dirs"] = asset_result.get("asset_dirs", [])
            written["counters"].update(asset_result.get("counters", {}))
        bytes_written = 0
        if self._writer is None and self.sink.read_suffixes:
            schema = self._output_schema(self.empty_schema or pa.schema([]))
            written["extra"] = {EMPTY_SCHEMA_KEY: schema_to_text(schema)}
        if self._writer is not None:
            self._writer.close()
            bytes_written = self._file.tell()
            self._stack.close()
            written["files"] = [self.relative]
        written["counters"].update(
            rows_written=self.rows_written,
            files_written=len(written["files"]),
            bytes_written=bytes_written,
        )
        return written

    async def abort(self) -> None:
        for task in self._pending:
            task.cancel()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        self._pending.clear()
        error = RuntimeError("attempt aborted")
        with contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
        with contextlib.suppress(Exception):
            self._stack.__exit__(type(error), error, None)
        if self.assets is not None:
            with contextlib.suppress(Exception):
                await self.assets.abort()

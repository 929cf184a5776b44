"""What sinks share: ``FolderSink`` (an output folder, its assets, finalization) and, for
Parquet and JSONL, ``FileSink`` (one data file per shard attempt, created lazily).

An empty result still reads back: attempts that wrote no rows write no data file;
each records the columns it knew (``extra.empty_schema`` in its manifest: from a
0-row block, or the source's columns when every step only filters). When no committed
attempt of the run wrote a data file, finalization writes one 0-row file under the
name of the first committed attempt, so ``read_parquet(out)`` returns no rows with the
right schema instead of failing on a folder without data files, and a mostly empty
result never gets a file per empty shard.

Example:
    >>> schema_from_text(schema_to_text(pa.schema([("id", pa.int32())]))).names
    ['id']
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import posixpath
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

from ..blocks import conform
from ..datatype import asset_of, with_asset_form
from ..io.datafile import DataFolder, completed_name
from ..lance.dataset import schema_from_text, schema_to_text
from ..manifests import AttemptManifest, AttemptResult
from ..manifests._attempts import LAYOUT_PATH, attempt_key, parse_attempt_key
from .assets import make_asset_writer, resolve_assets_argument
from .protocol import AttemptKey, AttemptWriter, Committed, Leftovers
from .reference_audit import ReferenceRecorder
from .template import FilenameTemplate

MAX_PENDING_BLOCKS = 4
EMPTY_SCHEMA_KEY = "empty_schema"


class FolderSink:
    """Base of sinks that write into one output folder (a :class:`~refiner_core.sinks.Sink`).

    It holds the output folder and the ``assets=`` config, records the layout readers
    rely on, and gives finalization's defaults (no commit, no empty-result file, asset
    folders of rejected attempts removed); subclasses give ``format`` and ``open_attempt``.
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

    def open_attempt(
        self, shard_id: str, attempt_id: str, run_id: str
    ) -> AttemptWriter:  # pragma: no cover
        raise NotImplementedError

    def commit(self, committed: list[AttemptManifest], run_id: str) -> Committed:
        """Hook for sinks that need a commit (Lance); plain files are visible already."""
        return Committed()

    def write_empty_result(self, committed: dict[str, AttemptManifest]) -> list[str]:
        """Nothing to write for an empty result unless the format has data files."""
        return []

    def remove_leftovers(
        self, keep: set[AttemptKey], run_id: str, check: Callable[[], None]
    ) -> Leftovers:
        """Delete asset folders named for attempts that are not kept (``check`` before each)."""
        leftovers = Leftovers()
        if self.assets is None:
            return leftovers
        subdir = self.assets.subdir
        for name in self.folder.listdir(subdir):
            key = parse_attempt_key(name)
            if key is not None and key not in keep:
                check()
                self.folder.rm(f"{subdir}/{name}", recursive=True)
                leftovers.rejected.add(key)
                leftovers.removed += 1
        return leftovers

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise when this format cannot store ``schema``."""


class TableWriter(Protocol):
    """Writes Arrow tables into one open data file (what ``open_table_writer`` returns)."""

    def write(self, table: pa.Table) -> None: ...

    def close(self) -> None: ...


def _completed_relative(relative: str) -> str | None:
    """The file a leftover temporary file of an interrupted write would have become."""
    directory, base = posixpath.split(relative)
    name = completed_name(base)
    if name is None:
        return None
    return posixpath.join(directory, name) if directory else name


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

    def open_table_writer(self, file: Any, schema: pa.Schema) -> TableWriter:  # pragma: no cover
        raise NotImplementedError

    def write_empty_result(self, committed: dict[str, AttemptManifest]) -> list[str]:
        """The 0-row file of an empty result (see the module doc); none when a committed
        attempt wrote data, or when no attempt knew the columns."""
        if not self.read_suffixes or not committed or any(m.files for m in committed.values()):
            return []
        known = [m for _, m in sorted(committed.items()) if EMPTY_SCHEMA_KEY in m.extra]
        if not known:
            return []
        first = known[0]
        schema = schema_from_text(first.extra[EMPTY_SCHEMA_KEY])
        relative = self.template.format(first.shard_id, first.attempt_id)
        with self.folder.open_atomic(relative) as f:
            self.open_table_writer(f, schema).close()
        return [relative]

    def remove_leftovers(
        self, keep: set[AttemptKey], run_id: str, check: Callable[[], None]
    ) -> Leftovers:
        """Delete data files (and temporary files of interrupted writes) and asset
        folders named for attempts that are not kept (``check`` before each)."""
        leftovers = Leftovers()
        for relative in self._candidate_files():
            parsed = self.template.parse(relative)
            if parsed is None and (completed := _completed_relative(relative)) is not None:
                parsed = self.template.parse(completed)
            if parsed and parsed not in keep:
                check()
                self.folder.rm(relative)
                leftovers.rejected.add(parsed)
                leftovers.removed += 1
        assets = super().remove_leftovers(keep, run_id, check)
        return Leftovers(leftovers.rejected | assets.rejected, leftovers.removed + assets.removed)

    def _candidate_files(self) -> list[str]:
        """Files that could carry the template's names: one listing when its folder is
        fixed, else every file below the fixed part of its folder (bookkeeping and
        asset folders left out)."""
        directory = posixpath.dirname(self.template.template)
        if "{" not in directory:
            return [posixpath.join(directory, n) for n in self.folder.listdir(directory)]
        fixed = posixpath.dirname(directory[: directory.index("{")])
        skip = ("_refiner/", *((f"{self.assets.subdir}/",) if self.assets else ()))
        return [r for r in self.folder.find(fixed) if not r.startswith(skip)]


class FileAttemptWriter:
    """Writes one shard attempt: assets first, then the data file that points at them."""

    def __init__(self, sink: Any, shard_id: str, attempt_id: str) -> None:
        self.sink = sink
        self.shard_id = shard_id
        self.attempt_id = attempt_id
        self.relative = self.data_file()
        self.assets = make_asset_writer(sink.assets, sink.folder, attempt_key(shard_id, attempt_id))
        self._stack = contextlib.ExitStack()
        self._file: Any = None
        self._writer: TableWriter | None = None
        self._schema: pa.Schema | None = None
        self.rows_written = 0
        self.rows_seen = 0
        # The columns of an attempt that wrote no rows, when known (see the module doc).
        self.empty_schema: pa.Schema | None = None
        self._pending: collections.deque[asyncio.Future] = collections.deque()
        # the references this attempt's asset writer made, checked on close
        self._references = ReferenceRecorder(shard_id, attempt_id) if self.assets else None

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
        if self._references is not None:
            self._references.note(table, self.rows_written)
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
        assert self._writer is not None  # opened by the first block
        self._writer.write(table)

    async def close(self) -> AttemptResult:
        asset_dirs: tuple[str, ...] = ()
        counters: dict[str, int] = {}
        extra: dict[str, Any] = {}
        audit = None
        if self.assets is not None:
            while self._pending:
                for ready in await self._pending.popleft():
                    self._write_table(ready)
            for ready in await self.assets.flush():
                self._write_table(ready)
            asset_result = await self.assets.close()
            asset_dirs = tuple(asset_result.get("asset_dirs", ()))
            counters.update(asset_result.get("counters", {}))
        bytes_written = 0
        files: tuple[str, ...] = ()
        if self._writer is None and self.sink.read_suffixes:
            schema = self._output_schema(self.empty_schema or pa.schema([]))
            extra = {EMPTY_SCHEMA_KEY: schema_to_text(schema)}
        if self._writer is not None:
            self._writer.close()
            bytes_written = self._file.tell()
            self._stack.close()
            files = (self.relative,)
        if self._references is not None and self.assets is not None:
            audit = await asyncio.to_thread(
                self._references.verify,
                self.sink.folder,
                listed=asset_dirs,
                copied_sizes=self.assets.copied_sizes,
            )
            counters.update(
                references_checked=audit.checked, reference_failures=audit.failure_count
            )
        counters.update(
            rows_written=self.rows_written, files_written=len(files), bytes_written=bytes_written
        )
        return AttemptResult(
            files=files,
            asset_dirs=asset_dirs,
            counters=counters,
            extra=extra,
            reference_audit=audit,
        )

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

"""What both asset writers share: per-cell jobs, missing-asset policies, table rebuild."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from ...datatype import clip_conversion_error, with_asset_form
from ...errors import RefinerError
from ...io.datafile import is_local
from ...manifests import ASSET_COUNTER_KEYS
from .checksum_column import checksum_field, checksum_slot
from .columns import AssetColumn, asset_columns
from .fetch import Filesystems, describe
from .sources import SourcePolicy
from .unmarked import warn_unmarked

DROPPED = object()

# column index -> the new field and the new cells of every row
_Replaced = dict[int, tuple[pa.Field, list[Any]]]


class AssetWriteError(RefinerError, RuntimeError):
    """An asset could not be read or written for a reason other than a missing file."""


class MissingAssetError(RefinerError, FileNotFoundError):
    """An asset's file does not exist and the missing policy is ``"error"``."""


class AssetWriterBase:
    """One shard attempt's asset writer; subclasses define ``output_form`` and ``_write_column``."""

    output_form = "path"

    def __init__(self, config: Any, folder: Any, attempt: str) -> None:
        self.config = config
        self.folder = folder
        self.attempt = attempt
        self.attempt_dir = f"{config.subdir}/{attempt}"
        self.filesystems = Filesystems(
            folder.fs.protocol,
            folder.storage_options,
            config.source_storage_options,
            SourcePolicy(config.allowed_sources),
        )
        self.local_output = is_local(folder.fs)
        self.counters = dict.fromkeys(ASSET_COUNTER_KEYS, 0)
        # URL -> bytes of each file copied whole (the file writer's), for the reference audit
        self.copied_sizes: dict[str, int] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._touched = False

    # threads ---------------------------------------------------------------
    async def in_thread(self, fn: Any, *args: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=max(4, self.config.max_in_flight))
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # policy ----------------------------------------------------------------
    def on_missing(
        self, column: AssetColumn, row: int, element: int | None, path: str, shard_id: str
    ) -> Any:
        """Apply the missing policy to one cell or list element; returns its replacement."""
        self.counters["missing_assets"] += 1
        policy = self.config.missing_policy
        if policy == "set_null":
            self.counters["cells_nulled"] += 1
            return None
        if policy == "drop_row":
            return DROPPED
        where = f"column {column.name!r}, row {row}" + (
            f" element {element}" if element is not None else ""
        )
        raise MissingAssetError(
            f"missing asset in {where} of shard {shard_id}: {path} does not exist. Fix the path, "
            "or pass missing_policy='set_null' (keep the row, null the cell) or 'drop_row'"
        )

    def fail(
        self,
        column: AssetColumn,
        row: int,
        element: int | None,
        value: Any,
        exc: Exception,
        shard_id: str,
    ) -> Exception:
        """An error naming the column, row and value; keeps ValueError/TypeError/EOFError types."""
        where = f"column {column.name!r}, row {row}" + (
            f" element {element}" if element is not None else ""
        )
        message = f"cannot write asset in {where} of shard {shard_id} ({describe(value)}): {exc}"
        kind = type(exc) if type(exc) in (ValueError, TypeError, EOFError) else AssetWriteError
        error = kind(message)
        error.__cause__ = exc
        return error

    # table -------------------------------------------------------------------
    async def process_table(self, table: pa.Table, *, shard_id: str, first_row: int) -> pa.Table:
        """``table`` with its asset columns written: cells replaced by what the writer
        made of them, rows a missing asset dropped left out."""
        columns = asset_columns(table.schema)
        if not columns:
            warn_unmarked(table, self.config)
        for column in columns:  # before any copy: nothing half-written
            if column.info.form == "clip":
                raise ValueError(clip_conversion_error(column.name, "clip", self.output_form))
        if not columns or table.num_rows == 0:
            return table
        if self.output_form == "path" and self.config.checksum is not None:
            for column in columns:  # a clash with a user column fails before any copy
                checksum_slot(table.schema, column.field)
        self._touched = True
        dropped = [False] * table.num_rows
        written: dict[int, list[tuple[str, int]]] = {}
        replaced: _Replaced = {}
        checksummed: _Replaced = {}
        for column in columns:
            values = table.column(column.index).to_pylist()
            new_values = await self._write_column(
                column, values, dropped, written, shard_id=shard_id, first_row=first_row
            )
            for i, value in enumerate(new_values):
                if _drops(column, value):
                    dropped[i] = True
            replaced[column.index] = (self.output_field(column), new_values)
            sums = self.take_checksums(column)
            if sums is not None:
                sum_field = checksum_field(column.field, self.config.checksum)
                checksummed[column.index] = (sum_field, sums)
        self._forget_dropped(written, dropped)
        self.counters["rows_dropped"] += dropped.count(True)
        return _rebuild(table, replaced, checksummed, dropped)

    def output_field(self, column: AssetColumn) -> pa.Field:
        """The field of ``column`` once its values are written."""
        return with_asset_form(column.field, self.output_form)

    def take_checksums(self, column: AssetColumn) -> list[Any] | None:
        """The checksum cells of ``column`` written by the last ``_write_column``, if any."""
        return None

    def _forget_dropped(
        self, written: dict[int, list[tuple[str, int]]], dropped: list[bool]
    ) -> None:
        """Delete the files already copied for rows that a later cell dropped after all."""
        for row, files in written.items():
            if dropped[row]:
                for relative, size in files:
                    self.folder.rm(relative)
                    self.counters["assets_written"] -= 1
                    self.counters["asset_bytes"] -= size

    def jobs(self, column: AssetColumn, values: list[Any], dropped: list[bool]):
        """``(row index, element index or None, value)`` for every non-null asset value."""
        for i, value in enumerate(values):
            if dropped[i] or value is None:
                continue
            if column.info.is_list:
                for j, element in enumerate(value):
                    if element is not None:
                        yield i, j, element
            else:
                yield i, None, value

    @staticmethod
    def place(
        results: list[Any],
        column: AssetColumn,
        values: list[Any],
        row: int,
        element: int | None,
        value: Any,
    ) -> None:
        if element is None:
            results[row] = value
        else:
            if not isinstance(results[row], list):
                results[row] = list(values[row])
            results[row][element] = value

    async def _write_column(
        self, column, values, dropped, written, *, shard_id, first_row
    ) -> list[Any]:  # pragma: no cover
        """New cell values of one column; files it creates per row go into ``written``."""
        raise NotImplementedError

    # lifecycle -------------------------------------------------------------
    async def process(self, table: pa.Table, *, shard_id: str, first_row: int) -> list[pa.Table]:
        return [await self.process_table(table, shard_id=shard_id, first_row=first_row)]

    async def flush(self) -> list[pa.Table]:
        return []

    def result(self) -> dict[str, Any]:
        return {
            "asset_dirs": [self.attempt_dir] if self._touched else [],
            "counters": dict(self.counters),
        }

    async def close(self) -> dict[str, Any]:
        self._shutdown()
        return self.result()

    async def abort(self) -> None:
        self._shutdown()
        self.discard()

    def discard(self) -> None:
        """Remove whatever this failed attempt already copied, so nothing half-done stays visible."""
        if self._touched:
            self.folder.rm(self.attempt_dir, recursive=True)


def _drops(column: AssetColumn, value: Any) -> bool:
    """Whether a written cell (or one of its list elements) asks for its row to go."""
    if value is DROPPED:
        return True
    return column.info.is_list and isinstance(value, list) and any(v is DROPPED for v in value)


def _rebuild(
    table: pa.Table, replaced: _Replaced, checksummed: _Replaced, dropped: list[bool]
) -> pa.Table:
    """``table`` with the ``replaced`` columns (each followed by its checksum column, in
    place of any the input had) and without the ``dropped`` rows."""
    replaced_slots = {
        checksum_slot(table.schema, table.schema.field(index)) for index in checksummed
    }
    keep = [i for i, d in enumerate(dropped) if not d]
    arrays = []
    fields = []
    for index, field in enumerate(table.schema):
        if index in replaced_slots:
            continue
        if index in replaced:
            new_field, values = replaced[index]
            arrays.append(pa.array([values[i] for i in keep], type=new_field.type))
            fields.append(new_field)
            if index in checksummed:
                sum_field, sums = checksummed[index]
                arrays.append(pa.array([sums[i] for i in keep], type=sum_field.type))
                fields.append(sum_field)
        else:
            column = table.column(index)
            if len(keep) != table.num_rows:
                column = column.take(pa.array(keep, type=pa.int64()))
            arrays.append(column)
            fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

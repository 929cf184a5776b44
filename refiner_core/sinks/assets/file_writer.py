"""``FileAssetConfig``: copy every asset to its own file; cells become the new paths."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

from ...io.datafile import is_local
from .base import DROPPED, AssetWriterBase
from .columns import asset_file_name
from .fetch import MissingAsset, open_source


class FileAssetWriter(AssetWriterBase):
    """Copies assets with up to ``max_in_flight`` copies at once, shared across blocks.

    Same-filesystem copies are server-side (``fs.copy``; local ``copyfile``), other
    copies stream through this worker. Files land under
    ``<output>/<subdir>/<shard>__<attempt>/<column>/<row>_<name>``.
    """

    output_form = "path"

    def __init__(self, config: Any, folder: Any, attempt: str) -> None:
        super().__init__(config, folder, attempt)
        self._slots = asyncio.Semaphore(config.max_in_flight)

    def _copy(self, relative: str, value: Any, form: str) -> int:
        """Copy one asset to ``relative``; returns its size. Runs in a worker thread."""
        destination = self.folder.join(relative)
        if form == "path":
            fs, path = self.filesystems.resolve(value)
            same = fs is self.folder.fs or (is_local(fs) and self.local_output)
            if same:
                if is_local(fs):
                    os.makedirs(os.path.dirname(destination), exist_ok=True)
                    try:
                        shutil.copyfile(path, destination)
                    except FileNotFoundError as exc:
                        raise MissingAsset(value) from exc
                    return os.path.getsize(destination)
                try:
                    size = int(fs.size(path))
                except FileNotFoundError as exc:
                    raise MissingAsset(value) from exc
                fs.copy(path, destination)
                return size
        source = open_source(value, form, self.filesystems)
        with self.folder.open_atomic(relative, size_hint=source.size) as f:
            for chunk in source.chunks():
                f.write(chunk)
        return source.size

    async def _one(
        self, relative: str, value: Any, form: str
    ) -> tuple[int | None, BaseException | None]:
        async with self._slots:
            try:
                return await self.in_thread(self._copy, relative, value, form), None
            except Exception as exc:
                return None, exc

    async def _write_column(self, column, values, dropped, *, shard_id, first_row) -> list[Any]:
        results: list[Any] = list(values)
        jobs = list(self.jobs(column, values, dropped))
        directory = f"{self.attempt_dir}/{column.dirname}"
        relatives = [
            f"{directory}/{asset_file_name(first_row + row, element, value, column.info.form)}"
            for row, element, value in jobs
        ]
        tasks = [
            asyncio.ensure_future(self._one(relative, value, column.info.form))
            for relative, (_, _, value) in zip(relatives, jobs, strict=True)
        ]
        try:
            outcomes = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        written_by_row: dict[int, list[str]] = {}
        for (row, element, value), relative, (size, error) in zip(
            jobs, relatives, outcomes, strict=True
        ):
            if error is not None:
                if isinstance(error, MissingAsset):
                    new = self.on_missing(column, first_row + row, element, error.path, shard_id)
                    self.place(results, column, values, row, element, new)
                    continue
                raise self.fail(column, first_row + row, element, value, error, shard_id)
            self.counters["assets_written"] += 1
            self.counters["asset_bytes"] += size
            written_by_row.setdefault(row, []).append(relative)
            self.place(results, column, values, row, element, self.folder.url_of(relative))
        for row, value in enumerate(results):
            is_dropped = value is DROPPED or (
                isinstance(value, list) and any(v is DROPPED for v in value)
            )
            if is_dropped:
                for relative in written_by_row.get(row, []):
                    self.folder.rm(relative)
                    self.counters["assets_written"] -= 1
        return results

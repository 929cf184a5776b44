"""``FileAssetConfig``: copy every asset to its own file; cells become the new paths."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from ...cpus import available_cpus
from ...io.checksum import Hasher
from ...io.datafile import is_local
from ...io.kernel_copy import copy_file
from .base import AssetWriterBase
from .columns import AssetColumn, asset_file_name
from .fetch import MissingAsset, check_path, is_remote, open_source, size_or_missing

# Local-to-local copies cost tens of microseconds each: a thread hand-off per file
# would cost more than the copy, so they go to the threads in runs of this many, and
# at most ``local_threads()`` runs at once. Each copy releases the GIL around its system
# calls, so threads beyond the CPUs only make them wait for it again.
LOCAL_RUN = 64
LOCAL_THREADS_MAX = 4


@functools.cache
def local_threads() -> int:
    """Threads for local copies: one per CPU this process may use, at most 4."""
    return min(LOCAL_THREADS_MAX, available_cpus())


# Copied files go to one folder per this many rows. A local filesystem creates one
# file at a time per folder (the folder's lock is held while the inode is allocated),
# so threads that copy into different folders create files in parallel.
ROWS_PER_FOLDER = 1000


class FileAssetWriter(AssetWriterBase):
    """Copies assets with up to ``max_in_flight`` copies at once, shared across blocks.

    Same-filesystem copies are server-side (``fs.copy``; locally a kernel copy), other
    copies stream through this worker. Copies that touch no network (local source,
    local output) run in batches of ``LOCAL_RUN``, at most ``local_threads()`` batches at
    once, each batch holding one of the ``max_in_flight`` slots; batches go out in
    turn from different row folders. Files land under
    ``<output>/<subdir>/<shard>__<attempt>/<column>/<row // 1000>/<row>_<name>``.
    """

    output_form = "path"

    def __init__(self, config: Any, folder: Any, attempt: str) -> None:
        super().__init__(config, folder, attempt)
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._local_slots = asyncio.Semaphore(min(local_threads(), config.max_in_flight))
        self._sums: dict[str, str] = {}  # relative path -> checksum of the copy
        self._column_sums: dict[str, list[Any]] = {}

    def take_checksums(self, column: Any) -> list[Any] | None:
        return self._column_sums.pop(column.name, None)

    def _copy(self, relative: str, value: Any, form: str) -> int:
        """Copy one asset to ``relative``; returns its size. Runs in a worker thread.

        With ``checksum=`` every copy streams through here, hashed on the way."""
        if form == "path" and self.config.checksum is None:
            fs, path = self.filesystems.resolve(check_path(value))
            if self.folder.same_filesystem(fs):
                size = None if is_local(fs) else size_or_missing(fs, path, value)
                try:
                    copied = self.folder.copy_from(fs, path, relative)
                except FileNotFoundError as exc:
                    raise MissingAsset(value) from exc
                return copied if size is None else size
        source = open_source(value, form, self.filesystems)
        hasher = Hasher(self.config.checksum) if self.config.checksum else None
        with self.folder.open_atomic(relative, size_hint=source.size) as f:
            for chunk in source.chunks():
                if hasher is not None:
                    hasher.update(chunk)
                f.write(chunk)
        if hasher is not None:
            self._sums[relative] = hasher.checksum()
        return source.size

    def _copy_run(self, items: list[tuple[str, Any]], form: str) -> list[tuple[Any, Any]]:
        """Copy ``(relative, value)`` items one after another; ``(size, error)`` for each."""
        outcomes: list[tuple[Any, Any]] = []
        for relative, value in items:
            try:
                outcomes.append((self._copy(relative, value, form), None))
            except Exception as exc:
                outcomes.append((None, exc))
        return outcomes

    def _kernel_copy_run(self, items: list[tuple[str, Any]], folder: str) -> list[tuple[Any, Any]]:
        """Copy local ``(file name, path)`` items into ``folder`` (relative, in the local
        output) inside the kernel; ``(size, error)`` for each. What :meth:`_copy` does
        for them, with one ``stat`` (the source policy's, whose size the copy reuses) and
        no per-file path checks: the names are built from safe characters only."""
        folder = self.folder.local_dir(folder)
        check = self.filesystems.policy.check_local_file
        outcomes: list[tuple[Any, Any]] = []
        for name, value in items:
            try:
                path, size = check(check_path(value))
                outcomes.append((copy_file(path, f"{folder}/{name}", size), None))
            except FileNotFoundError:
                outcomes.append((None, MissingAsset(value)))
            except Exception as exc:
                outcomes.append((None, exc))
        return outcomes

    async def _run(self, fn: Any, items: list[tuple[str, Any]], arg: str, *, local: bool) -> Any:
        if local:
            async with self._local_slots, self._slots:
                return await self.in_thread(fn, items, arg)
        async with self._slots:
            return await self.in_thread(fn, items, arg)

    def _start(self, run, jobs, names, directory, form, local):
        """The copy of one run of jobs: in the kernel when it can, else through :meth:`_copy`."""
        if local and form == "path" and self.config.checksum is None:
            # local source, local output: a run lies in one row folder (``local_runs``)
            folder = f"{directory}/{names[run[0]].partition('/')[0]}"
            items = [(names[k].partition("/")[2], jobs[k][2]) for k in run]
            return self._run(self._kernel_copy_run, items, folder, local=True)
        items = [(f"{directory}/{names[k]}", jobs[k][2]) for k in run]
        return self._run(self._copy_run, items, form, local=local)

    async def _write_column(
        self,
        column: AssetColumn,
        values: list[Any],
        dropped: list[bool],
        written: dict[int, list[tuple[str, int]]],
        *,
        shard_id: str,
        first_row: int,
    ) -> list[Any]:
        """The column's new paths, every asset copied to a file of its own."""
        results: list[Any] = list(values)
        jobs = list(self.jobs(column, values, dropped))
        directory = f"{self.attempt_dir}/{column.dirname}"
        form = column.info.form
        names = [asset_path(first_row + row, element, value, form) for row, element, value in jobs]
        outcomes = await self._copy_all(jobs, names, directory, form)
        sums: list[Any] | None = None
        if self.config.checksum is not None:
            sums = [[None] * len(v) if column.info.is_list and v else None for v in values]
            self._column_sums[column.name] = sums
        # names hold safe characters only, so the column folder's URL is their prefix
        directory_url = self.folder.url_of(directory)
        copied = copied_bytes = 0
        for (row, element, value), name, (size, error) in zip(jobs, names, outcomes, strict=True):
            if error is not None:
                if not isinstance(error, MissingAsset):
                    raise self.fail(column, first_row + row, element, value, error, shard_id)
                new = self.on_missing(column, first_row + row, element, error.path, shard_id)
                self.place(results, column, values, row, element, new)
                continue
            copied += 1
            copied_bytes += size
            relative = f"{directory}/{name}"
            written.setdefault(row, []).append((relative, size))
            url = f"{directory_url}/{name}"
            self.copied_sizes[url] = size
            self.place(results, column, values, row, element, url)
            if sums is not None:
                _put(sums, row, element, self._sums.pop(relative))
        self.counters["assets_written"] += copied
        self.counters["asset_bytes"] += copied_bytes
        return results

    async def _copy_all(
        self, jobs: list[tuple[int, int | None, Any]], names: list[str], directory: str, form: str
    ) -> list[tuple[Any, Any]]:
        """Copy every job's value to ``directory/<its name>``; per job, in order, its
        ``(size, None)`` or ``(None, error)``."""
        local = [self.local_output and not is_remote(value, form) for _, _, value in jobs]
        folders = [name.partition("/")[0] for name in names]
        runs = local_runs([k for k, is_local in enumerate(local) if is_local], folders)
        runs += [[k] for k, is_local in enumerate(local) if not is_local]
        tasks = [
            asyncio.ensure_future(self._start(run, jobs, names, directory, form, local[run[0]]))
            for run in runs
        ]
        try:
            done = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        outcomes: list[Any] = [None] * len(jobs)
        for run, run_outcomes in zip(runs, done, strict=True):
            for k, outcome in zip(run, run_outcomes, strict=True):
                outcomes[k] = outcome
        return outcomes


def _put(cells: list[Any], row: int, element: int | None, value: Any) -> None:
    """Set a row's cell, or one element of its list."""
    if element is None:
        cells[row] = value
    else:
        cells[row][element] = value


def asset_path(row: int, element: int | None, value: Any, form: str) -> str:
    """``<row folder>/<file name>`` of one copied asset, relative to its column folder.

    >>> asset_path(12_345, None, "/data/clip.mp4", "path")
    '00012/00012345_clip.mp4'
    """
    return f"{row_folder(row)}/{asset_file_name(row, element, value, form)}"


def row_folder(row: int) -> str:
    """The folder of ``row``'s copied files: one per ``ROWS_PER_FOLDER`` rows.

    >>> row_folder(999), row_folder(1_000)
    ('00000', '00001')
    """
    return f"{row // ROWS_PER_FOLDER:05d}"


def local_runs(jobs: list[int], folders: list[str]) -> list[list[int]]:
    """Batches of at most ``LOCAL_RUN`` of ``jobs`` (indexes into ``folders``, each job's
    row folder), each within one row folder, ordered so that consecutive batches come
    from different folders.

    >>> local_runs([0, 1, 2], ["00000", "00001", "00001"])
    [[0], [1, 2]]
    >>> folders = [row_folder(r * 10) for r in range(130)]
    >>> [len(r) for r in local_runs(list(range(130)), folders)]
    [64, 30, 36]
    """
    by_folder: dict[str, list[int]] = {}
    for k in jobs:
        by_folder.setdefault(folders[k], []).append(k)
    queues = [
        [ks[i : i + LOCAL_RUN] for i in range(0, len(ks), LOCAL_RUN)] for ks in by_folder.values()
    ]
    runs: list[list[int]] = []
    for turn in range(max((len(q) for q in queues), default=0)):
        runs.extend(q[turn] for q in queues if turn < len(q))
    return runs

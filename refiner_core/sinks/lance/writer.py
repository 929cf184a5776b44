"""One shard attempt of ``write_lance``: assets, then fragments Lance writes but never commits."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import queue
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ...lance.dataset import open_dataset, schema_to_text
from ...lance.isolation import child_result, isolating, read_table_frames, write_table_frame
from ...manifests import AttemptResult
from ...manifests._attempts import attempt_key
from ..files import FileAttemptWriter

STATE_DIR = "_refiner/lance"
_END = object()


def state_path(kind: str, name: str) -> str:
    return f"{STATE_DIR}/{kind}/{name}.json"


def _write_fragments(spec: dict[str, Any], batches: Iterator[pa.RecordBatch], on_file) -> list:
    """Write ``batches`` as uncommitted fragments; returns their metadata as JSON dicts."""
    from lance.fragment import write_fragments
    from lance.progress import FragmentWriteProgress

    class Progress(FragmentWriteProgress):
        def begin(self, fragment, **kwargs):
            pass

        def complete(self, fragment, **kwargs):
            on_file([f.path for f in fragment.files])

    target: Any = spec["url"]
    if spec["write_mode"] == "append":
        target = open_dataset(spec["url"], spec["options"], spec["read_version"])
    reader = pa.RecordBatchReader.from_batches(spec["schema"], batches)
    fragments = write_fragments(
        reader,
        target,
        schema=spec["schema"],
        mode=spec["write_mode"],
        progress=Progress(),
        max_rows_per_file=spec["max_rows_per_file"],
        max_rows_per_group=spec["max_rows_per_group"],
        storage_options=spec["options"],
    )
    return [f.to_json() for f in fragments]


def journal_paths(entry: dict[str, Any]) -> list[str]:
    """The data files and asset folder an attempt journal names."""
    return [*entry.get("data_files", []), *([entry["asset_dir"]] if entry.get("asset_dir") else [])]


class _ThreadStream:
    """Streams tables to :func:`_write_fragments` running on a thread of this process."""

    def __init__(self, spec: dict[str, Any], on_file) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._aborted = False
        self.result: list | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(spec, on_file), name="refiner-lance-writer", daemon=True
        )
        self._thread.start()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if self._aborted:
                raise RuntimeError("attempt aborted")
            yield from item.to_batches()

    def _run(self, spec: dict[str, Any], on_file) -> None:
        try:
            self.result = _write_fragments(spec, self._batches(), on_file)
        except BaseException as exc:
            self.error = exc

    def put(self, item: Any) -> None:
        while True:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the Lance writer stopped: {self.error!r}") from self.error
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def finish(self) -> list:
        self.put(_END)
        self._thread.join()
        if self.error is not None:
            raise self.error
        return list(self.result or [])

    def abort(self) -> None:
        self._aborted = True
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_END)
        self._thread.join(timeout=60)


class _ForkedStream:
    """Streams tables (Arrow IPC over a pipe) to :func:`_write_fragments` in a forked child.

    Used where Lance must stay out of this process (see :mod:`.isolation`).
    """

    def __init__(self, spec: dict[str, Any], on_file) -> None:
        data_r, data_w = os.pipe()
        result_r, result_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - runs in the child
            os.close(data_w)
            os.close(result_r)
            try:
                with os.fdopen(data_r, "rb") as f:
                    child_result(_write_fragments, (spec, self._receive(f), on_file), result_w)
            finally:
                os._exit(0)
        os.close(data_r)
        os.close(result_w)
        self._out = os.fdopen(data_w, "wb")
        self._result_fd = result_r

    @staticmethod
    def _receive(f: Any) -> Iterator[pa.RecordBatch]:  # pragma: no cover - runs in the child
        for table in read_table_frames(f):
            yield from table.to_batches()

    def _outcome(self) -> list:
        with os.fdopen(self._result_fd, "rb") as f:
            data = f.read()
        os.waitpid(self.pid, 0)
        if not data:
            raise RuntimeError("the Lance writer process died without an answer")
        kind, value = pickle.loads(data)
        if kind == "error":
            raise value
        return value

    def put(self, table: pa.Table) -> None:
        try:
            write_table_frame(self._out, table)
        except BrokenPipeError:
            self._outcome()
            raise

    def finish(self) -> list:
        write_table_frame(self._out, None)
        self._out.close()
        return self._outcome()

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self._out.close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self._result_fd)


class LanceAttemptWriter(FileAttemptWriter):
    """One shard attempt: assets first (the shared asset writers), then Lance fragments.

    Tables stream to Lance's fragment writer; a journal under ``_refiner/lance/journal``
    names every finished data file, so finalization can delete the files of an
    attempt that crashed before writing its manifest.
    """

    def __init__(self, sink: Any, shard_id: str, attempt_id: str, state: dict[str, Any]) -> None:
        super().__init__(sink, shard_id, attempt_id)
        self.state = state
        self.journal_path = state_path("journal", attempt_key(shard_id, attempt_id))
        self.asset_dir = getattr(self.assets, "attempt_dir", None)
        self.data_files: list[str] = []
        self._stream: _ThreadStream | _ForkedStream | None = None
        self._journaled = False
        self._lock = threading.Lock()

    def data_file(self) -> str:
        """Lance names its data files itself; they are listed in ``data_files``."""
        return ""

    def _journal(self) -> None:
        entry = {
            "run_id": self.state.get("run_id"),
            "shard_id": self.shard_id,
            "attempt_id": self.attempt_id,
            "asset_dir": self.asset_dir,
            "data_files": list(self.data_files),
        }
        self.sink.folder.write_bytes(self.journal_path, json.dumps(entry).encode())
        self._journaled = True

    def _on_file(self, paths: list[str]) -> None:
        with self._lock:
            self.data_files.extend(f"data/{p}" for p in paths)
            self._journal()

    async def write(self, table: pa.Table) -> None:
        if not self._journaled:
            self._journal()
        await super().write(table)

    def _open(self, schema: pa.Schema) -> pa.Schema:
        schema = self.sink.schema_for(schema, self.state, where=self.where)
        stream = _ForkedStream if isolating() else _ThreadStream
        self._stream = stream(self.sink.fragment_spec(self.state, schema), self._on_file)
        return schema

    def _put(self, table: pa.Table) -> None:
        assert self._stream is not None  # opened by the first block
        self._stream.put(table)

    async def close(self) -> AttemptResult:
        written = await super().close()
        fragments = self._stream.finish() if self._stream is not None else []
        files = [file for fragment in fragments for file in fragment["files"]]
        self.data_files = [f"data/{file['path']}" for file in files]
        counters = {
            **written.counters,
            "files_written": len(files),
            "bytes_written": sum(file.get("file_size_bytes") or 0 for file in files),
        }
        lance = {
            "fragments": fragments,
            "schema": schema_to_text(self._schema) if fragments and self._schema else None,
            "read_version": self.state.get("read_version"),
        }
        return dataclasses.replace(
            written, files=tuple(self.data_files), counters=counters, extra={"lance": lance}
        )

    async def abort(self) -> None:
        await super().abort()
        if self._stream is not None:
            self._stream.abort()
        folder = self.sink.folder
        with contextlib.suppress(Exception):  # no journal yet: nothing more to delete
            self.data_files += json.loads(folder.read_bytes(self.journal_path))["data_files"]
        for relative in [*self.data_files, *([self.asset_dir] if self.asset_dir else [])]:
            with contextlib.suppress(Exception):
                folder.rm(relative, recursive=True)
        with contextlib.suppress(Exception):
            folder.rm(self.journal_path)

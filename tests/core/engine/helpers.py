"""Small helpers shared by the engine tests: call logs that work across processes,
and readers of what landed in an output folder."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq


class CallLog:
    """Records events as empty files in a folder, so forked workers can report back.

    Each event is ``<kind>__<pid>__<tag>__<unique>``; :meth:`events` lists them.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def record(self, kind: str, tag: Any = "") -> None:
        name = f"{kind}__{os.getpid()}__{tag}__{uuid.uuid4().hex[:8]}"
        (self.folder / name).touch()

    def events(self, kind: str) -> list[tuple[int, str]]:
        """``(pid, tag)`` of every recorded event of ``kind``."""
        out = []
        for path in self.folder.iterdir():
            event, pid, tag, _ = path.name.split("__")
            if event == kind:
                out.append((int(pid), tag))
        return sorted(out)

    def count(self, kind: str) -> int:
        return len(self.events(kind))


def data_files(output: Path, suffix: str = ".parquet") -> list[Path]:
    """Data files under ``output``, excluding refiner's own ``_refiner`` folder."""
    return sorted(
        p for p in Path(output).rglob(f"*{suffix}") if "_refiner" not in p.relative_to(output).parts
    )


def all_files(output: Path) -> list[str]:
    """Every file below ``output`` as a relative path (hidden ones included)."""
    return sorted(str(p.relative_to(output)) for p in Path(output).rglob("*") if p.is_file())


def read_output_rows(output: Path) -> list[dict[str, Any]]:
    """Every row of every data Parquet file in ``output``, in file order."""
    rows: list[dict[str, Any]] = []
    for path in data_files(output):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def row_group_sizes(output: Path) -> list[int]:
    """Row counts of every row group written under ``output``."""
    sizes = []
    for path in data_files(output):
        meta = pq.ParquetFile(path).metadata
        sizes.extend(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    return sizes


class SinkBlocks:
    """Row counts of the blocks a sink's attempt writers receive, in arrival order
    (``writer``: the Parquet/JSONL one by default, or e.g. ``LanceAttemptWriter``).

    Records from forked workers too (each block appends a line to one file), so a test
    sees exactly what reached the sink, whatever the row groups written from it.
    """

    def __init__(self, monkeypatch: Any, path: Path, writer: Any = None) -> None:
        from refiner_core.sinks.files import FileAttemptWriter

        writer = writer or FileAttemptWriter
        self.path = path
        put = writer._put

        def recording(attempt: Any, table: Any) -> None:
            with open(path, "a") as f:
                f.write(f"{table.num_rows}\n")
            put(attempt, table)

        monkeypatch.setattr(writer, "_put", recording)

    def sizes(self) -> list[int]:
        return [int(n) for n in self.path.read_text().split()] if self.path.exists() else []

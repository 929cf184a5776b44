"""Helpers of the Lance tests: every direct Lance call runs in a forked child.

Lance is not fork-safe, and ``launch_local`` forks workers from the test process, so
these tests never let Lance run in the pytest process itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from refiner_core.lance.isolation import call_isolated


def _open(uri: str, options: dict | None, version: int | None):
    import lance

    return lance.dataset(uri, version=version, storage_options=options)


def _table(uri: str, options: dict | None, version: int | None) -> pa.Table:
    return _open(uri, options, version).to_table()


def _facts(uri: str, options: dict | None) -> dict[str, Any]:
    ds = _open(uri, options, None)
    fragments = ds.get_fragments()
    return {
        "version": ds.version,
        "versions": [v["version"] for v in ds.versions()],
        "rows": ds.count_rows(),
        "schema": ds.schema,
        "data_files": sorted(f"data/{d.path}" for fr in fragments for d in fr.metadata.files),
        "fragments": len(fragments),
        "properties": {
            v["version"]: (ds.read_transaction(v["version"]).transaction_properties or {})
            for v in ds.versions()
        },
    }


def _write(table: pa.Table, uri: str, kwargs: dict) -> int:
    import lance

    return lance.write_dataset(table, uri, **kwargs).version


def table(uri: str, *, version: int | None = None, options: dict | None = None) -> pa.Table:
    """The dataset's rows, read by Lance itself."""
    return call_isolated(_table, uri, options, version)


def facts(uri: str, *, options: dict | None = None) -> dict[str, Any]:
    """Version, history, rows, schema, referenced data files and transaction properties."""
    return call_isolated(_facts, uri, options)


def write_dataset(table: pa.Table, uri: str, **kwargs: Any) -> int:
    """``lance.write_dataset`` in a child; returns the new version."""
    return call_isolated(_write, table, uri, kwargs)


def data_files(uri: str) -> list[str]:
    """Every ``data/*.lance`` file on disk (committed or not)."""
    folder = Path(uri) / "data"
    if not folder.exists():
        return []
    return sorted(f"data/{p.name}" for p in folder.iterdir() if p.name.endswith(".lance"))


def journals(uri: str) -> list[dict[str, Any]]:
    folder = Path(uri) / "_refiner" / "lance" / "journal"
    if not folder.exists():
        return []
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def manifests(uri: str) -> list[dict[str, Any]]:
    folder = Path(uri) / "_refiner" / "attempts"
    if not folder.exists():
        return []
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def media(folder: Path, count: int) -> list[str]:
    """``count`` small files of distinct bytes; returns their absolute paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"frame_{i:03d}.bin"
        path.write_bytes(payload(i))
        paths.append(str(path.resolve()))
    return paths


def payload(i: int) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(50 + 13 * i))


def run_manually(sequence: Any, run_id: str) -> list[dict[str, Any]]:
    """Plan and run the write stage of ``sequence`` in this process (no finalization)."""
    stage = sequence.stages[0]
    shards = stage.plan(run_id=run_id)
    return stage.run_task(shards, run_id=run_id)


def lance_in_this_process() -> bool:
    """Whether the Lance extension has created its runtime threads in this process."""
    names = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            names.add(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except OSError:
            continue
    return any("tokio" in n or "lance" in n for n in names)

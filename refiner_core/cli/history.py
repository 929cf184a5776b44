"""``refiner history`` and ``refiner rollback``: a versioned dataset folder's versions,
and moving its published pointer back (see :mod:`refiner_core.io.dataset_history`).

Example:
    >>> import io, json, tempfile
    >>> from refiner_core.io import DataFolder
    >>> from refiner_core.cli.console import output_console
    >>> folder = DataFolder(tempfile.mkdtemp())
    >>> record = {"state": "published", "published_at": 0.0, "rows_written": 3}
    >>> folder.write_bytes("_versions/v-a.json", json.dumps(record).encode())
    >>> folder.write_bytes("_current.json", json.dumps({"version": "v-a"}).encode())
    >>> console = output_console(file=io.StringIO())
    >>> render_history(folder, console)
    >>> "v-a" in console.file.getvalue() and "1970-01-01 00:00:00" in console.file.getvalue()
    True
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from ..io import DataFolder
from ..io.dataset_history import dataset_versions, is_dataset_folder
from .console import print_whole

__all__ = ["dataset_folder", "render_history"]


def dataset_folder(folder: DataFolder) -> DataFolder:
    """``folder`` when it is a versioned dataset folder; else a ``ValueError`` saying what to pass."""
    if not is_dataset_folder(folder):
        raise ValueError(
            f"{folder.url} is not a versioned dataset folder (it has no _current.json or "
            "_versions/); pass a Dagster dataset asset's folder, or for a partitioned asset "
            "its partition's folder (<asset>/<partition>)"
        )
    return folder


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_history(folder: DataFolder, console: Console) -> None:
    """Print one line per version: name, state, published at, run, parent (marked
    ``(appended)`` when the version added rows to it), rows, and a ``*`` on the published one; then the last rollback, when there was one."""
    table = Table(title=f"versions of {folder.url}")
    table.add_column("", no_wrap=True)
    for name in ("version", "state", "published_at", "run", "parent"):
        table.add_column(name, no_wrap=True)
    table.add_column("rows", justify="right", no_wrap=True)
    rolled_back = None
    for v in dataset_versions(folder):
        state = v.shown_state if v.on_disk or v.state != "published" else "missing"
        table.add_row(
            "*" if v.current else "",
            v.name,
            state,
            _when(v.published_at),
            v.run or "-",
            f"{v.parent or '-'} (appended)" if v.appended_to else v.parent or "-",
            f"{v.rows:,}" if v.rows is not None else "-",
        )
        if v.current and v.record.get("rollbacks"):
            rolled_back = v.record["rollbacks"][-1]
    print_whole(console, table)
    if rolled_back is not None:
        console.print(
            f"* rolled back from {rolled_back.get('from')} at {_when(rolled_back.get('at'))} "
            f"by {rolled_back.get('by') or 'unknown'}: {rolled_back.get('reason') or 'no reason given'}",
            markup=False,
        )

"""``refiner inspect``: what an output holds, rendered with rich.

Rows, shards, attempts kept and removed, asset columns, blocks with their size and
fill, every counter with its meaning, and where the files are.

Example:
    >>> import io, tempfile, refiner_core as mdr
    >>> from rich.console import Console
    >>> from refiner_core.cli.inspection import render_inspection
    >>> from refiner_core.cli.storage import open_output
    >>> out = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"n": 1}]).write_parquet(out).launch_local()
    >>> console = Console(file=io.StringIO(), width=120)
    >>> render_inspection(open_output(out), console)
    >>> "rows_written" in console.file.getvalue()
    True
"""

from __future__ import annotations

import datetime as dt

from rich.console import Console
from rich.table import Table

from .blocks import column_blocks, fill_histogram, list_media
from .console import print_whole
from .counters import counters_of, meaning
from .rows import asset_columns
from .storage import POINTER, VERSIONS, StoredOutput

MAX_BLOCKS_SHOWN = 12


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _when(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _overview(output: StoredOutput) -> Table:
    summary = output.summary or {}
    table = Table(title="Output", show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("url", output.url)
    table.add_row("format", output.format)
    state = "finalized" if output.finalized else "written, not finalized (no summary yet)"
    if output.version is not None:
        state = f"{output.version.get('state', '?')} (Dagster dataset version)"
    table.add_row("state", state)
    if output.version is not None:
        published = (output.pointer or {}).get("version")
        name = output.url.rstrip("/").rsplit("/", 1)[-1]
        current = "this one" if published == name else (published or "none")
        table.add_row("published version", current)
        table.add_row("versions kept", ", ".join(output.versions) or "-")
    rows = summary.get(
        "rows_written", sum(a.counters.get("rows_written", 0) for a in output.attempts)
    )
    if output.inheritance is not None:
        shared = output.inheritance
        table.add_row(
            "rows", f"{rows + shared.rows:,} ({shared.rows:,} shared with {shared.parent})"
        )
        table.add_row("appended to", shared.parent)
    else:
        table.add_row("rows", f"{rows:,}")
    kept_ids = {(f.split("__")[0]) for f in output.files}
    table.add_row("shards", str(summary.get("shards", len(kept_ids))))
    table.add_row(
        "attempts",
        f"{len(output.attempts)} manifest(s) on storage, "
        f"{summary.get('rejected_attempts_removed', 0)} rejected attempt(s) removed",
    )
    if summary.get("finalized_at"):
        table.add_row("finalized at", _when(summary.get("finalized_at")))
    return table


def _asset_table(output: StoredOutput) -> Table | None:
    columns = asset_columns(output)
    if not columns:
        return None
    table = Table(title="Asset columns", title_justify="left")
    for name in ("column", "kind", "form", "list"):
        table.add_column(name, no_wrap=True)
    for c in columns:
        table.add_row(c.name, c.kind, c.form, "yes" if c.is_list else "no")
    return table


def _block_tables(output: StoredOutput, show_all: bool) -> list[Table]:
    media = list_media(output)
    blocks = [f for f in media if f.is_block]
    tables = []
    stats = column_blocks(media, output.target_bytes)
    if stats:
        tables.append(_blocks_per_column(stats))
        tables.append(_block_listing(blocks, stats[0].target, show_all))
    copied = [f for f in media if not f.is_block]
    if copied:
        tables.append(_copied_per_column(copied))
    return tables


def _blocks_per_column(stats: list) -> Table:
    table = Table(title="Blocks per column", title_justify="left")
    for name in ("column", "blocks", "bytes", "smallest", "median", "largest"):
        table.add_column(name, justify="right" if name != "column" else "left", no_wrap=True)
    table.add_column("blocks per 10 % of fill", no_wrap=True)
    for s in stats:
        histogram = " ".join(str(n) for n in fill_histogram(s.fills))
        sizes = (s.total, s.smallest, s.median, s.largest)
        table.add_row(s.column, str(s.count), *(human_bytes(v) for v in sizes), histogram)
    base = "the block size target" if stats[0].target_known else "the largest block"
    table.caption = f"fill: block size / {base} ({human_bytes(stats[0].target)}), 10 bins"
    return table


def _block_listing(blocks: list, target: int, show_all: bool) -> Table:
    listing = Table(title="Blocks", title_justify="left")
    for name in ("file", "size", "fill"):
        listing.add_column(name, justify="left" if name == "file" else "right", no_wrap=True)
    shown = blocks if show_all else blocks[:MAX_BLOCKS_SHOWN]
    for f in shown:
        relative = f"{f.attempt_dir}/{f.column}/{f.name}"
        listing.add_row(relative, human_bytes(f.size), f"{min(f.size / target, 1):.0%}")
    if len(shown) < len(blocks):
        listing.caption = f"{len(blocks) - len(shown)} more; --all lists every block"
    return listing


def _copied_per_column(copied: list) -> Table:
    table = Table(title="Copied files per column", title_justify="left")
    for name in ("column", "files", "bytes"):
        table.add_column(name, no_wrap=True)
    for column in sorted({f.column for f in copied}):
        mine = [f.size for f in copied if f.column == column]
        table.add_row(column, str(len(mine)), human_bytes(sum(mine)))
    return table


def _counters_table(output: StoredOutput) -> Table:
    record = output.summary
    title = "Counters (summary)"
    if record is None:
        record = {}
        for attempt in output.attempts:
            for k, v in attempt.counters.items():
                record[k] = record.get(k, 0) + v
        title = "Counters (summed over every attempt manifest: not finalized)"
    table = Table(title=title, title_justify="left")
    table.add_column("counter", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("meaning")  # the one column that wraps
    for key, value in counters_of(record).items():
        table.add_row(key, f"{value:,}", meaning(key))
    return table


def _where_table(output: StoredOutput) -> Table:
    table = Table(title="Where the files are", show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    files = output.files
    table.add_row("table files", "\n".join(output.folder.url_of(f) for f in files[:5]) or "-")
    if len(files) > 5:
        table.add_row("", f"... {len(files) - 5} more")
    dirs = output.asset_dirs
    table.add_row("asset folders", "\n".join(output.folder.url_of(d) for d in dirs[:5]) or "-")
    if len(dirs) > 5:
        table.add_row("", f"... {len(dirs) - 5} more")
    table.add_row("attempt manifests", output.folder.url_of("_refiner/attempts"))
    table.add_row("summary", output.folder.url_of("_refiner/summary.json"))
    if output.version is not None:
        dataset = output.url.rstrip("/").rsplit("/", 1)[0]
        table.add_row("published pointer", f"{dataset}/{POINTER}")
        table.add_row("version records", f"{dataset}/{VERSIONS}/")
    return table


def render_inspection(output: StoredOutput, console: Console, *, show_all: bool = False) -> None:
    """Print the inspection of ``output`` on ``console``, no table cut short: only
    prose and URLs wrap (each table has at most one column that may), names, numbers
    and units never do (see :func:`~refiner_core.cli.console.print_whole`)."""
    tables = [_overview(output), _asset_table(output), *_block_tables(output, show_all)]
    tables += [_counters_table(output), _where_table(output)]
    for table in tables:
        if table is not None:
            print_whole(console, table)

"""Where the ``refiner`` command prints, laid out so that nothing it prints is cut.

On a terminal, tables take the terminal's width: long text wraps, and a table whose
numbers, units and headers cannot fit is printed wider than the terminal (which then
wraps the lines) rather than cut short with an ellipsis. Piped or redirected, output
is as wide as it needs to be, or ``$COLUMNS`` wide when that is set, since there is no
screen to fit and the reader may be a program or ``grep``.

Example:
    >>> import io
    >>> from rich.table import Table
    >>> console = output_console(file=io.StringIO())
    >>> table = Table("bytes_written_to_the_long_named_column")
    >>> table.add_row("123,456,789,012")
    >>> print_whole(console, table)
    >>> "123,456,789,012" in console.file.getvalue()
    True
"""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console, RenderableType
from rich.measure import Measurement

# The width of piped output when $COLUMNS is unset: wider than any table we print.
UNLIMITED_WIDTH = 100_000


def _columns_env() -> int | None:
    try:
        value = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def output_console(file: IO[str] | None = None) -> Console:
    """A rich console on ``file`` (stdout by default) sized as the module docstring says."""
    stream = file if file is not None else sys.stdout
    if stream.isatty():
        return Console(file=file)
    return Console(file=file, width=_columns_env() or UNLIMITED_WIDTH)


def whole_width(console: Console, renderable: RenderableType) -> int:
    """The narrowest width that prints ``renderable`` without cutting anything: its
    longest word, and for a table each ``no_wrap`` column's widest cell."""
    unbounded = console.options.update_width(UNLIMITED_WIDTH)
    needed = Measurement.get(console, unbounded, renderable).minimum
    for column in getattr(renderable, "columns", ()):
        if column.no_wrap:
            # rich's minimum holds a column's longest word; a no_wrap one needs its widest cell
            cells = [Measurement.get(console, unbounded, c) for c in (column.header, *column.cells)]
            needed += max(m.maximum for m in cells) - max(m.minimum for m in cells)
    return needed


def print_whole(console: Console, renderable: RenderableType) -> None:
    """Print ``renderable`` at the console's width, or wider when that would cut it
    (see :func:`whole_width`): a terminal wraps a long line, an ellipsis loses data."""
    width = console.width
    console.width = max(width, whole_width(console, renderable))
    try:  # print(width=...) cannot go past console.width
        console.print(renderable)
    finally:
        console.width = width

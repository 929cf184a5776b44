"""Per-stage progress: a rich bar on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time

from ..manifests import human_bytes


def _human(n: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}P"


class StageProgress:
    """Shows shards done, rows, bytes, rate and elapsed time for one stage.

    ``rate=False`` leaves out rows per second, for a stage that counts rows it did not
    process (a finalization reports the rows its write stage wrote); ``started`` is
    when the stage began, if before this object.

    Example:
        >>> progress = StageProgress("demo stage 1: finalize", 1, rate=False)
        >>> progress.update(rows=2_500, nbytes=2048, shards=1)
        >>> progress.describe()
        '1/1 shards, 2.5k rows, 2.0 KiB'
    """

    def __init__(
        self,
        label: str,
        total_shards: int,
        *,
        interval: float = 2.0,
        rate: bool = True,
        started: float | None = None,
    ) -> None:
        self.label = label
        self.total = total_shards
        self.done = 0
        self.rows = 0
        self.bytes = 0
        self.rate = rate
        self.started = time.monotonic() if started is None else started
        self._interval = interval
        self._last_line = time.monotonic()
        self._rich = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} shards"),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._rich.add_task(label, total=total_shards, detail="")
            self._rich.start()

    def _detail(self) -> str:
        detail = f"{_human(self.rows)} rows, {human_bytes(self.bytes)}"
        if self.rate:
            elapsed = max(1e-9, time.monotonic() - self.started)
            detail += f", {_human(self.rows / elapsed)} rows/s"
        return detail

    def describe(self) -> str:
        """Shards done and the detail, as the plain progress line shows them."""
        return f"{self.done}/{self.total} shards, {self._detail()}"

    def update(self, rows: int = 0, nbytes: int = 0, shards: int = 0) -> None:
        self.rows += rows
        self.bytes += nbytes
        self.done += shards
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, detail=self._detail())
            return
        now = time.monotonic()
        if now - self._last_line >= self._interval:
            self._last_line = now
            self._print()

    def _print(self) -> None:
        elapsed = time.monotonic() - self.started
        print(
            f"[{self.label}] {self.describe()}, {elapsed:.1f}s",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, detail=self._detail())
            self._rich.stop()
        else:
            self._print()

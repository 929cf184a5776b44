r"""Engine progress in the Dagster run log, not only on the step's stderr.

``launch_local`` prints a progress line per stage every few seconds to ``sys.stderr``.
:func:`progress_to_log` tees those lines: they still reach stderr, and every line
starting with ``[`` (the engine's progress format) is also sent to ``context.log``,
at most once per ``interval`` seconds per stage, plus each stage's last line, so a
long write shows its progress in the Dagster UI without flooding the event log.

Example:
    >>> import sys
    >>> from refiner_dagster.progress_log import progress_to_log
    >>> class Log:
    ...     lines = []
    ...     def info(self, line): self.lines.append(line)
    >>> with progress_to_log(Log(), interval=60):
    ...     _ = sys.stderr.write("[write] 1/2 shards, 10 rows\n")
    ...     _ = sys.stderr.write("[write] 2/2 shards, 20 rows\n")
    >>> Log.lines  # the second line came within the interval: held, then sent at the end
    ['[write] 1/2 shards, 10 rows', '[write] 2/2 shards, 20 rows']
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import dagster as dg

import refiner_core as mdr

__all__ = ["ProgressTee", "launch_in_step", "progress_to_log"]


class ProgressTee(io.TextIOBase):
    """A text stream writing to ``stream`` and forwarding progress lines to ``log``."""

    def __init__(self, stream: Any, log: Any, *, interval: float) -> None:
        self._stream = stream
        self._log = log
        self._interval = interval
        self._pid = os.getpid()
        self._pending = ""
        self._last_sent: dict[str, float] = {}
        self._held: dict[str, str] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # set while forwarding: the log may write to stderr

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False  # plain lines, never a live bar that cannot be forwarded

    def write(self, text: str) -> int:
        self._stream.write(text)
        if os.getpid() != self._pid or getattr(self._local, "forwarding", False):
            return len(text)  # a forked worker, or the log's own handler writing to stderr
        with self._lock:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            send = [line for line in lines if self._due(line)]
        self._send(send)
        return len(text)

    def _send(self, lines: list[str]) -> None:
        self._local.forwarding = True
        try:
            for line in lines:
                self._log.info(line)
        finally:
            self._local.forwarding = False

    def flush(self) -> None:
        self._stream.flush()

    def _due(self, line: str) -> bool:
        """Whether a progress line goes out now (else it is held as its stage's last)."""
        if not line.startswith("[") or "]" not in line:
            return False
        stage = line[1 : line.index("]")]
        now = time.monotonic()
        if now - self._last_sent.get(stage, float("-inf")) >= self._interval:
            self._last_sent[stage] = now
            self._held.pop(stage, None)
            return True
        self._held[stage] = line
        return False

    def close_out(self) -> None:
        """Send each stage's last line that the rate limit held back."""
        with self._lock:
            send = [self._pending] if self._pending and self._due(self._pending) else []
            self._pending = ""
            send += list(self._held.values())
            self._held.clear()
        self._send(send)


@contextlib.contextmanager
def progress_to_log(log: Any, *, interval: float = 10.0) -> Iterator[ProgressTee]:
    """Tee ``sys.stderr`` into ``log`` (rate-limited) while the block runs."""
    tee = ProgressTee(sys.stderr, log, interval=interval)
    try:
        with contextlib.redirect_stderr(tee):
            yield tee
    finally:
        tee.close_out()


def launch_in_step(
    sequence: mdr.PipelineSequence,
    context: dg.OutputContext,
    num_workers: int,
    interval: float,
    *,
    rundir: str | None = None,
) -> mdr.LaunchStats:
    """Run ``sequence`` in a Dagster step: progress in the run log, and a missing-asset
    failure that says which Dagster setting changes the missing policy. ``rundir`` lets
    a retry of the step skip the shards an earlier try committed."""
    where = context.asset_key.to_user_string()
    try:
        with progress_to_log(context.log, interval=interval):
            return sequence.launch_local(name=where, num_workers=num_workers, rundir=rundir)
    except mdr.StageFailed as exc:
        message = str(exc)
        if "MissingAssetError" not in message:
            raise
        hint = (
            f"set metadata {{'refiner/missing_policy': 'set_null'}} (null the cell) or "
            f"'drop_row' (drop the row) on asset {where}, or the IO manager's missing_policy "
            "field for every asset"
        )
        message = re.sub(r"pass missing_policy='set_null'.*?'drop_row'", hint, message)
        if hint not in message:
            message += f". To keep going without the file, {hint}"
        raise mdr.StageFailed(message, stage=exc.stage, shard_id=exc.shard_id) from exc

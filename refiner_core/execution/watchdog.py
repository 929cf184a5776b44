"""Noticing a worker process that has stopped making progress.

A worker sends the launcher a message as its shard's blocks go by (rows and bytes
written, at most every 0.25 s), when it finishes a shard and when it exits. A worker
that sends nothing for ``progress_timeout_s`` seconds, whether it runs a shard or was
told to stop and has not exited, is taken as hung (a callback that never returns, a
deadlock inside a native library, a process stopped by a signal): the launcher kills
it and fails the stage naming the worker and its shard, instead of waiting forever.

The default, :data:`DEFAULT_PROGRESS_TIMEOUT_S` (30 minutes), leaves room for one
block of slow rows (a row block holds 1024 rows by default: 1.7 s per row) and still
ends a hang within the hour; ``None`` turns the watch off.

Example:
    >>> watch = ProgressWatch(timeout_s=10.0, now=lambda: 0.0)
    >>> watch.assign(0, "00003", now=0.0)
    >>> watch.overdue(now=9.0)
    []
    >>> [(hung.worker, hung.shard_id) for hung in watch.overdue(now=10.5)]
    [(0, '00003')]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_PROGRESS_TIMEOUT_S = 1800.0


def check_progress_timeout(value: float | None) -> float | None:
    """``value`` if it is a positive number of seconds or ``None`` (never time out)."""
    if value is None or (
        isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    ):
        return value
    raise ValueError(
        f"progress_timeout_s must be a positive number of seconds, or None to wait for "
        f"workers forever; got {value!r}"
    )


@dataclass(frozen=True)
class Hung:
    """A worker that sent nothing for ``silent_s`` seconds: running ``shard_id``, or,
    when ``running`` is false, after being told to stop (``shard_id`` its last shard)."""

    worker: int
    shard_id: str | None
    running: bool
    silent_s: float

    def describe(self, pid: int | None, timeout_s: float) -> str:
        """The cause a stage failure reports, with how to tell a slow shard from a hang."""
        who = f"worker process {self.worker} (pid {pid})"
        if self.running:
            what = f"sent no progress on shard {self.shard_id} for {self.silent_s:.1f} s"
        else:
            last = f" (its last shard was {self.shard_id})" if self.shard_id else ""
            what = f"did not exit within {self.silent_s:.1f} s of being told to stop{last}"
        return (
            f"{who} {what} (progress_timeout_s={timeout_s:g}), so it was taken as hung and "
            "killed. If the shard is only slow (one block of rows takes longer than that), "
            "pass a larger launch_local(progress_timeout_s=...), or None to wait forever"
        )


class ProgressWatch:
    """When each worker was last heard from, and which shard it holds."""

    def __init__(
        self, timeout_s: float | None, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self._now = now
        self._heard: dict[int, float] = {}
        self._shard: dict[int, str | None] = {}
        self._running: dict[int, bool] = {}

    def assign(self, worker: int, shard_id: str | None, *, now: float | None = None) -> None:
        """``worker`` was sent ``shard_id``, or told to stop when it is ``None``."""
        if shard_id is not None or worker not in self._shard:
            self._shard[worker] = shard_id
        self._running[worker] = shard_id is not None
        self.heard(worker, now=now)

    def heard(self, worker: int, *, now: float | None = None) -> None:
        """``worker`` sent a message: it is making progress."""
        self._heard[worker] = self._now() if now is None else now

    def forget(self, worker: int) -> None:
        """``worker`` has exited (or is already being handled)."""
        self._heard.pop(worker, None)

    def overdue(self, *, now: float | None = None) -> list[Hung]:
        """The workers silent for longer than the timeout, longest silent first."""
        if self.timeout_s is None:
            return []
        now = self._now() if now is None else now
        hung = [
            Hung(w, self._shard.get(w), self._running.get(w, False), now - heard)
            for w, heard in self._heard.items()
            if now - heard > self.timeout_s
        ]
        return sorted(hung, key=lambda h: -h.silent_s)

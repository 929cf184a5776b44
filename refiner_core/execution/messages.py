"""What a worker process tells its launcher, one message at a time over its own pipe.

The launcher sends a worker a :class:`~refiner_core.sources.base.Shard` to run, or
``None`` to stop after the shard it runs; the worker answers with the values below.

Example:
    >>> Progress(worker=0, rows=10, nbytes=640).rows
    10
    >>> Failure("00002", "ValueError: bad row").message(1, "write parquet")
    'stage 1 (write parquet) failed on shard 00002: ValueError: bad row'
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from ..manifests import AttemptManifest


@dataclass(frozen=True)
class Progress:
    """Rows and bytes a worker wrote since its last message."""

    worker: int
    rows: int
    nbytes: int


@dataclass(frozen=True)
class ShardDone:
    """A shard's attempt finished and its manifest is persisted; with the rows and
    bytes written since the worker's last message."""

    worker: int
    shard_id: str
    manifest: AttemptManifest
    rows: int
    nbytes: int


@dataclass(frozen=True)
class WorkerError:
    """A worker failed (running ``shard_id``, or between shards when it is ``None``)."""

    worker: int
    shard_id: str | None
    cause: str
    traceback: str


@dataclass(frozen=True)
class WorkerExit:
    """The worker is done: it closes its pipe next."""

    worker: int


WorkerMessage = Progress | ShardDone | WorkerError | WorkerExit


@dataclass(frozen=True)
class Failure:
    """Why a sharded stage fails: the shard (if one was running), the cause and the
    worker's traceback (empty when the launcher noticed the failure itself)."""

    shard_id: str | None
    cause: str
    remote_traceback: str = ""

    def message(self, index: int, stage_name: str) -> str:
        """The :class:`~refiner_core.errors.StageFailed` message naming stage and shard."""
        where = f" on shard {self.shard_id}" if self.shard_id else ""
        text = f"stage {index} ({stage_name}) failed{where}: {self.cause}"
        if self.remote_traceback:
            text += f"\n\nworker traceback:\n{self.remote_traceback}"
        return text


def send(conn: Any, message: WorkerMessage) -> None:
    """Send one message whole: SIGTERM waits until it is written."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        conn.send(message)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

"""The body of a ``launch_local`` worker process: run the shards its launcher sends.

Each worker has its own pipe, so a worker that dies cannot leave a lock held that the
others need, and every message is written before the worker goes on.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
import traceback
from collections.abc import Iterator
from typing import Any

from ..errors import StepError
from ..io.ownership import Lease
from .lifeline import exit_with_parent
from .messages import Progress, ShardDone, WorkerError, WorkerExit, send
from .start_methods import stage_in_worker
from .worker import WorkerContext

PROGRESS_EVERY_S = 0.25


class _Stopped(BaseException):
    """Raised in a worker when the launcher stops it (SIGTERM) after another shard failed."""


def _stop_on_sigterm() -> None:
    """Turn the first SIGTERM into :class:`_Stopped` so the running shard unwinds
    (aborting its attempt, removing temporary files) and the worker closes its callbacks."""

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Stopped()

    signal.signal(signal.SIGTERM, handler)


def describe(exc: BaseException) -> str:
    """A failure's cause as the launcher reports it: a step error's own message, or the
    exception's type and message."""
    if isinstance(exc, StepError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class _Reporter:
    """Sums the rows and bytes a shard writes and sends them at most every
    ``PROGRESS_EVERY_S``; what is left goes with the shard's :class:`ShardDone`."""

    def __init__(self, conn: Any, worker: int) -> None:
        self.conn = conn
        self.worker = worker
        self.rows = 0
        self.nbytes = 0
        self.last = time.monotonic()

    def report(self, rows: int, nbytes: int) -> None:
        self.rows += rows
        self.nbytes += nbytes
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            send(self.conn, Progress(self.worker, *self.take()))
            self.last = now

    def take(self) -> tuple[int, int]:
        """The rows and bytes not sent yet; counting starts again from zero."""
        taken = (self.rows, self.nbytes)
        self.rows = self.nbytes = 0
        return taken


def _shards(conn: Any) -> Iterator[Any]:
    """The shards the launcher sends, until it sends ``None`` or is gone (end of file)."""
    while True:
        try:
            shard = conn.recv()
        except EOFError:
            return
        if shard is None:
            return
        yield shard


def _report_error(conn: Any, wid: int, shard_id: str | None, exc: BaseException) -> None:
    with contextlib.suppress(OSError):
        send(conn, WorkerError(wid, shard_id, describe(exc), traceback.format_exc()))


def worker_main(
    stage: Any,
    run_id: str,
    conn: Any,
    wid: int,
    lease: Lease | None = None,
    inherited: tuple[Any, ...] = (),
    launcher_pid: int | None = None,
) -> None:
    """Run the shards the launcher sends over ``conn`` until it sends ``None``.

    The launcher's ends of the pipes (``inherited`` by a forked worker) are closed, so
    the launcher's death reads as end-of-file, and the worker ends with its launcher
    (``launcher_pid``; 0 for the process that forked this worker).
    """
    for other in inherited:
        other.close()
    if launcher_pid is not None:
        # a fork-server worker's parent is the fork server, which exits with the launcher
        exit_with_parent(launcher_pid or os.getppid())
    # Everything inherited from the launcher lives as long as this worker: leave it
    # out of garbage collection, which would otherwise walk the whole imported heap
    # (tens of milliseconds with pyarrow and Dagster loaded) on every full collection.
    gc.freeze()
    reporter = _Reporter(conn, wid)
    current: str | None = None
    worker = None
    try:
        stage = stage_in_worker(stage)
        worker = WorkerContext()  # until it exists, SIGTERM simply ends the process
        _stop_on_sigterm()
        for shard in _shards(conn):
            current = shard.id
            manifest = stage.run_shard(
                shard, run_id=run_id, worker=worker, progress=reporter.report, lease=lease
            )
            send(conn, ShardDone(wid, shard.id, manifest, *reporter.take()))
            current = None
    except _Stopped:  # the launcher stops this worker after another shard failed
        pass
    except BaseException as exc:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # report and close undisturbed
        _report_error(conn, wid, current, exc)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _close(conn, wid, current, worker)


def _close(conn: Any, wid: int, current: str | None, worker: WorkerContext | None) -> None:
    """Close the worker's callbacks (reporting a failure), say so, and close the pipe."""
    if worker is not None:
        try:
            worker.close()
        except BaseException as exc:
            _report_error(conn, wid, current, exc)
    with contextlib.suppress(OSError):
        send(conn, WorkerExit(wid))
    conn.close()

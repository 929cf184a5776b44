"""The worker processes that run one sharded stage, and the launcher's side of them.

:class:`WorkerPool` starts up to ``num_workers`` processes, each with its own pipe,
hands out shards one at a time as workers finish, records every completed shard in
the run dir, and fails the stage on the first worker error, death or hang: the other
workers are then stopped (they abort their attempts) and drained.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing.connection as mp_connection
import os
import time
from typing import Any

from ..errors import StageFailed
from ..io.ownership import Lease
from .messages import Failure, Progress, ShardDone, WorkerError, WorkerExit
from .progress import StageProgress
from .rundir import RunDir
from .start_methods import stage_for_workers, worker_context
from .watchdog import DEFAULT_PROGRESS_TIMEOUT_S, ProgressWatch
from .worker_process import worker_main

POLL_S = 0.2
STOP_GRACE_S = 30.0


class WorkerPool:
    """Runs the shards of stage ``index`` on worker processes (see the module doc).

    Workers that closed their pipes join ``exiting``, for the launch to reap when it
    ends instead of waiting for their processes to tear down here."""

    def __init__(
        self,
        stage: Any,
        index: int,
        *,
        run_id: str,
        rundir: RunDir,
        progress: StageProgress,
        exiting: list[Any],
        start_method: str,
        lease: Lease | None = None,
        progress_timeout_s: float | None = DEFAULT_PROGRESS_TIMEOUT_S,
    ) -> None:
        self.stage = stage
        self.index = index
        self.run_id = run_id
        self.rundir = rundir
        self.progress = progress
        self.exiting = exiting
        self.start_method = start_method
        self.lease = lease
        self.progress_timeout_s = progress_timeout_s
        self._watch = ProgressWatch(progress_timeout_s)
        self._todo: collections.deque[Any] = collections.deque()
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._running: dict[int, str | None] = {}
        self._released: set[int] = set()  # workers already told to stop after their shard
        self._live: set[int] = set()
        self._remaining: set[str] = set()
        self._failure: Failure | None = None

    def run(self, shards: list[Any], num_workers: int) -> None:
        """Run ``shards`` on ``min(num_workers, len(shards))`` workers; raises
        :class:`~refiner_core.errors.StageFailed` naming the failed shard and cause."""
        self._todo = collections.deque(shards)
        self._remaining = {s.id for s in shards}
        self._start(min(num_workers, len(shards)))
        settled = False
        try:
            for w in range(len(self._procs)):
                self._dispatch(w)
            self._serve()
            settled = True
        finally:
            if self._failure is not None or not settled:  # not settled: the launcher raised
                for p in self._procs:
                    if p.is_alive():
                        p.terminate()  # the worker aborts its shard and closes its callbacks
            self._drain_until_exit()
        if self._failure is not None:
            raise StageFailed(
                self._failure.message(self.index, self.stage.name),
                stage=self.index,
                shard_id=self._failure.shard_id,
            )

    def _start(self, count: int) -> None:
        ctx = worker_context(self.start_method)
        sent = stage_for_workers(self.stage, self.start_method)
        forked = self.start_method == "fork"
        parent_pid = 0 if self.start_method == "forkserver" else os.getpid()
        for w in range(count):
            parent_end, child_end = ctx.Pipe()
            inherited = (*self._conns, parent_end) if forked else ()
            p = ctx.Process(
                target=worker_main,
                args=(sent, self.run_id, child_end, w, self.lease, inherited, parent_pid),
                daemon=True,
            )
            p.start()
            child_end.close()  # the worker holds the only other end: its exit reads as EOF
            self._procs.append(p)
            self._conns.append(parent_end)
        self._running = dict.fromkeys(range(count))
        self._live = set(range(count))

    def _fail(self, failure: Failure) -> None:
        """Keep the first failure: it is what the stage reports."""
        if self._failure is None:
            self._failure = failure

    def _dispatch(self, w: int) -> None:
        """Give worker ``w`` its next shard; with none left, tell it to stop."""
        shard = self._todo.popleft() if self._todo else None
        self._running[w] = shard.id if shard is not None else None
        self._watch.assign(w, self._running[w])
        if w in self._released:
            return
        with contextlib.suppress(OSError):  # a dead worker is noticed by its EOF
            self._conns[w].send(shard)
            if not self._todo:  # nothing follows: the worker stops after this shard unasked
                self._released.add(w)
                if shard is not None:
                    self._conns[w].send(None)

    def _serve(self) -> None:
        """Answer the workers until all have exited or one failed."""
        while self._live and self._failure is None:
            ready = mp_connection.wait([self._conns[w] for w in self._live], timeout=POLL_S)
            if not ready:  # a dead worker whose pipe end another process still holds
                self._notice_silent_deaths()
            for conn in ready:
                self._receive(self._conns.index(conn))
            if self._failure is None:
                self._kill_hung()
        if self._failure is None and self._remaining:
            self._fail(
                Failure(sorted(self._remaining)[0], "workers exited before finishing every shard")
            )

    def _notice_silent_deaths(self) -> None:
        for w in list(self._live):
            if not self._procs[w].is_alive():
                self._live.discard(w)
                if self._running[w] is not None or self._procs[w].exitcode != 0:
                    self._died(w)

    def _died(self, w: int) -> None:
        if self._failure is None:
            self._procs[w].join(timeout=5)
            cause = f"worker process {w} died with exit code {self._procs[w].exitcode}"
            self._fail(Failure(self._running[w], cause))

    def _receive(self, w: int) -> None:
        """Read and act on one message of worker ``w``; its end of file ends it."""
        try:
            message = self._conns[w].recv()
        except (EOFError, OSError):
            self._live.discard(w)
            if self._running[w] is not None or self._procs[w].exitcode not in (0, None):
                self._died(w)
            return
        self._watch.heard(w)
        if isinstance(message, Progress):
            self.progress.update(rows=message.rows, nbytes=message.nbytes)
        elif isinstance(message, ShardDone):
            self._dispatch(w)  # before the marker write, so the worker goes on meanwhile
            self.rundir.mark(self.index, message.manifest)
            self._remaining.discard(message.shard_id)
            self.progress.update(rows=message.rows, nbytes=message.nbytes, shards=1)
        elif isinstance(message, WorkerError):
            self._fail(Failure(message.shard_id, message.cause, message.traceback))
        elif isinstance(message, WorkerExit):
            self._live.discard(w)
            self._watch.forget(w)

    def _kill_hung(self) -> None:
        """Kill every worker silent for longer than the progress timeout; the first one
        found is the stage's failure."""
        for hung in self._watch.overdue():
            w = hung.worker
            self._watch.forget(w)
            if w not in self._live:  # already gone, and handled as such
                continue
            self._procs[w].kill()  # a hung worker cannot run its SIGTERM handler
            self._live.discard(w)
            cause = hung.describe(self._procs[w].pid, self.progress_timeout_s or 0)
            self._fail(Failure(hung.shard_id if hung.running else None, cause))

    def _drain_until_exit(self) -> None:
        """Wait until every worker has closed its pipe, reading its last messages so none
        blocks on a full pipe; shards that still completed are marked. Workers stuck past
        the grace period are killed. A worker that closed its pipe has nothing left to do
        but tear its process down, so it goes to ``exiting`` to be reaped later instead of
        being waited for here."""
        deadline = time.monotonic() + STOP_GRACE_S
        open_conns = list(self._conns)
        while open_conns and time.monotonic() < deadline:
            ready = mp_connection.wait(open_conns, timeout=0.05)
            if not ready and not any(p.is_alive() for p in self._procs):
                break  # every worker is gone and nothing is left to read
            for conn in [c for c in open_conns if c in ready]:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    open_conns.remove(conn)
                    continue
                if isinstance(message, ShardDone):
                    # the stage is already failing here; a marker that cannot be written
                    # only means the shard is redone by the next launch of this run
                    with contextlib.suppress(OSError):
                        self.rundir.mark(self.index, message.manifest)
        for p, conn in zip(self._procs, self._conns, strict=True):
            if conn in open_conns:  # stuck past the grace period
                p.kill()
                p.join(timeout=5)
            self.exiting.append(p)
            conn.close()


def reap(exiting: list[Any]) -> None:
    """End the workers that closed their pipes (by now they have normally exited)."""
    for p in exiting:
        if p.is_alive():
            p.kill()
        p.join(timeout=5)

"""``launch_local``: stages in order, sharded stages spread over worker processes."""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import multiprocessing.connection as mp_connection
import os
import shutil
import signal
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import StageFailed, StepError
from ..io.ownership import DEFAULT_STALE_AFTER_S, Lease, OutputOwnership
from ..manifests import AttemptManifest, DatasetSummary
from ..manifests._attempts import new_run_id
from ..validation import check_positive
from .fingerprint import RunFingerprint, describe_sequence, describe_stage
from .lifeline import exit_with_parent
from .progress import StageProgress
from .protocols import ReduceStage
from .stages import WriteStage
from .start_methods import (
    resolve_start_method,
    stage_for_workers,
    stage_in_worker,
    worker_context,
)
from .watchdog import DEFAULT_PROGRESS_TIMEOUT_S, ProgressWatch, check_progress_timeout
from .worker import WorkerContext

_PROGRESS_EVERY_S = 0.25
_POLL_S = 0.2
_STOP_GRACE_S = 30.0


class _Stopped(BaseException):
    """Raised in a worker when the launcher stops it (SIGTERM) after another shard failed."""


def _stop_on_sigterm() -> None:
    """Turn the first SIGTERM into ``_Stopped`` so the running shard unwinds (aborting its
    attempt, removing temporary files) and the worker closes its callbacks."""

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Stopped()

    signal.signal(signal.SIGTERM, handler)


@dataclass
class StageStats:
    index: int
    kind: str
    name: str
    shards: int = 0
    shards_skipped: int = 0
    rows: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0
    summary: DatasetSummary | None = None


@dataclass
class LaunchStats:
    """What ``launch_local`` returns: per-stage stats and the last finalization summary."""

    name: str
    run_id: str
    rundir: str | None
    stages: list[StageStats] = field(default_factory=list)
    summary: DatasetSummary | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values; summaries in their persisted JSON form."""
        data = asdict(self)
        for entry, stats in zip([data, *data["stages"]], [self, *self.stages], strict=True):
            entry["summary"] = stats.summary.to_json() if stats.summary is not None else None
        return data


def _describe(exc: BaseException) -> str:
    if isinstance(exc, StepError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _send(conn: Any, message: tuple) -> None:
    """Send one message whole: SIGTERM waits until it is written."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        conn.send(message)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _worker_main(
    stage: Any,
    run_id: str,
    conn: Any,
    wid: int,
    lease: Lease | None = None,
    inherited: tuple[Any, ...] = (),
    launcher_pid: int | None = None,
) -> None:
    """Run the shards the launcher sends over ``conn`` until it sends ``None``.

    Each worker has its own pipe, so a worker that dies cannot leave a lock held that
    the others need, and every message is written before the worker goes on. The
    launcher's ends of the pipes (``inherited`` by a forked worker) are closed, so
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
    current = None
    pending = [0, 0]
    last = [time.monotonic()]

    def report(rows: int, nbytes: int) -> None:
        pending[0] += rows
        pending[1] += nbytes
        now = time.monotonic()
        if now - last[0] >= _PROGRESS_EVERY_S:
            _send(conn, ("progress", wid, pending[0], pending[1]))
            pending[0] = pending[1] = 0
            last[0] = now

    worker = None
    try:
        stage = stage_in_worker(stage)
        worker = WorkerContext()  # until it exists, SIGTERM simply ends the process
        _stop_on_sigterm()
        while True:
            try:
                shard = conn.recv()
            except EOFError:  # the launcher is gone
                break
            if shard is None:
                break
            current = shard.id
            manifest = stage.run_shard(
                shard, run_id=run_id, worker=worker, progress=report, lease=lease
            )
            _send(conn, ("done", wid, shard.id, manifest, pending[0], pending[1]))
            pending[0] = pending[1] = 0
            current = None
    except _Stopped:  # the launcher stops this worker after another shard failed
        pass
    except BaseException as exc:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # report and close undisturbed
        with contextlib.suppress(OSError):
            _send(conn, ("error", wid, current, _describe(exc), traceback.format_exc()))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if worker is not None:
            try:
                worker.close()
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    _send(conn, ("error", wid, current, _describe(exc), traceback.format_exc()))
        with contextlib.suppress(OSError):
            _send(conn, ("exit", wid))
        conn.close()


def _write_json_atomic(path: str, value: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all: a temporary file, flushed, then renamed."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_state(path: str, key: str, *, what: str, fix: str) -> dict[str, Any]:
    """A run-dir JSON file that must hold ``key``; a ``ValueError`` naming it and the fix."""
    try:
        with open(path) as f:
            value = json.load(f)
        problem = None if isinstance(value, dict) and key in value else f"holds no {key!r}"
    except ValueError as exc:
        value, problem = None, f"is not valid JSON ({exc})"
    if problem is not None:
        raise ValueError(f"{path} ({what}) {problem}, so this rundir cannot be resumed. {fix}")
    return value


class _RunDir:
    """Completion markers that let a relaunch skip finished shards."""

    def __init__(
        self, path: str | None, name: str, workers: int = 1, *, fresh: bool = False
    ) -> None:
        self.temporary = path is None
        self._completed: dict[int, dict[str, AttemptManifest]] = {}
        self.path = path or tempfile.mkdtemp(prefix="refiner-run-")
        if fresh and os.path.isdir(self.path):
            shutil.rmtree(self.path)
        os.makedirs(self.path, exist_ok=True)
        self.fingerprint = RunFingerprint(self.path)
        state_file = os.path.join(self.path, "run.json")
        if os.path.exists(state_file):
            state = _read_state(
                state_file,
                "run_id",
                what="the run's state",
                fix=f"Delete the rundir {self.path!r} to start the run over, and launch again",
            )
            self.run_id = state["run_id"]
            # plans depend on the worker count: a relaunch plans as the first launch did,
            # so every shard id names the same rows (run dirs from before had no minimum)
            self.plan_workers = state.get("plan_workers", 1)
        else:
            self.run_id = new_run_id()
            self.plan_workers = workers
            _write_json_atomic(
                state_file,
                {
                    "run_id": self.run_id,
                    "name": name,
                    "created_at": time.time(),
                    "plan_workers": workers,
                },
            )

    def _stage_dir(self, index: int) -> str:
        return os.path.join(self.path, f"stage-{index:03d}")

    def completed(self, index: int) -> dict[str, AttemptManifest]:
        """Manifests of the stage's completed shards: read from disk once (earlier runs
        of this rundir), then kept up to date by :meth:`mark`."""
        done = self._completed.get(index)
        if done is None:
            done = self._completed[index] = {}
            directory = self._stage_dir(index)
            os.makedirs(directory, exist_ok=True)
            for name in os.listdir(directory):
                if name.endswith(".json") and not name.startswith("."):
                    path = os.path.join(directory, name)
                    data = _read_state(
                        path,
                        "shard_id",
                        what="a completed shard's marker",
                        fix="Delete the file (that shard is then run again) and launch again",
                    )
                    manifest = AttemptManifest.from_json(data, where=path)
                    done[manifest.shard_id] = manifest
        return done

    def mark(self, index: int, manifest: AttemptManifest) -> None:
        done = self.completed(index)
        directory = self._stage_dir(index)
        _write_json_atomic(os.path.join(directory, f"{manifest.shard_id}.json"), manifest.to_json())
        done[manifest.shard_id] = manifest

    def cleanup(self) -> None:
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)


def _run_sharded(
    stage: Any,
    index: int,
    shards: list[Any],
    num_workers: int,
    run_id: str,
    rundir: _RunDir,
    progress: StageProgress,
    exiting: list[Any],
    start_method: str,
    lease: Lease | None = None,
    progress_timeout_s: float | None = DEFAULT_PROGRESS_TIMEOUT_S,
) -> None:
    ctx = worker_context(start_method)
    sent = stage_for_workers(stage, start_method)
    forked = start_method == "fork"
    parent_pid = 0 if start_method == "forkserver" else os.getpid()
    todo = collections.deque(shards)
    n = min(num_workers, len(shards))
    procs: list[Any] = []
    conns: list[Any] = []
    for w in range(n):
        parent_end, child_end = ctx.Pipe()
        inherited = (*conns, parent_end) if forked else ()
        p = ctx.Process(
            target=_worker_main,
            args=(sent, run_id, child_end, w, lease, inherited, parent_pid),
            daemon=True,
        )
        p.start()
        child_end.close()  # the worker holds the only other end: its exit reads as EOF
        procs.append(p)
        conns.append(parent_end)
    running: dict[int, str | None] = dict.fromkeys(range(n))
    released: set[int] = set()  # workers already told to stop after their shard
    live = set(range(n))
    remaining = {s.id for s in shards}
    failure: tuple[str | None, str, str] | None = None
    watch = ProgressWatch(progress_timeout_s)

    def dispatch(w: int) -> None:
        shard = todo.popleft() if todo else None
        running[w] = shard.id if shard is not None else None
        watch.assign(w, running[w])
        if w in released:
            return
        with contextlib.suppress(OSError):  # a dead worker is noticed by its EOF
            conns[w].send(shard)
            if not todo:  # nothing follows: the worker stops after this shard without asking
                released.add(w)
                if shard is not None:
                    conns[w].send(None)

    def died(w: int) -> tuple[str | None, str, str]:
        procs[w].join(timeout=5)
        return (running[w], f"worker process {w} died with exit code {procs[w].exitcode}", "")

    def kill_hung() -> tuple[str | None, str, str] | None:
        found = None
        for hung in watch.overdue():
            w = hung.worker
            watch.forget(w)
            if w not in live:  # already gone, and handled as such
                continue
            procs[w].kill()  # a hung worker cannot run its SIGTERM handler
            live.discard(w)
            cause = hung.describe(procs[w].pid, progress_timeout_s or 0)
            found = found or (hung.shard_id if hung.running else None, cause, "")
        return found

    settled = False
    try:
        for w in range(n):
            dispatch(w)
        while live and failure is None:
            ready = mp_connection.wait([conns[w] for w in live], timeout=_POLL_S)
            if not ready:  # a dead worker whose pipe end another process still holds
                for w in list(live):
                    if not procs[w].is_alive():
                        live.discard(w)
                        if running[w] is not None or procs[w].exitcode != 0:
                            failure = failure or died(w)
            for conn in ready:
                w = conns.index(conn)
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    live.discard(w)
                    if running[w] is not None or procs[w].exitcode not in (0, None):
                        failure = failure or died(w)
                    continue
                watch.heard(w)
                kind = message[0]
                if kind == "progress":
                    progress.update(rows=message[2], nbytes=message[3])
                elif kind == "done":
                    _, _, shard_id, manifest, rows, nbytes = message
                    dispatch(w)  # before the marker write, so the worker goes on meanwhile
                    rundir.mark(index, manifest)
                    remaining.discard(shard_id)
                    progress.update(rows=rows, nbytes=nbytes, shards=1)
                elif kind == "error":
                    failure = failure or (message[2], message[3], message[4])
                elif kind == "exit":
                    live.discard(w)
                    watch.forget(w)
            failure = failure or kill_hung()
        if failure is None and remaining:
            failure = (sorted(remaining)[0], "workers exited before finishing every shard", "")
        settled = True
    finally:
        if failure is not None or not settled:  # not settled: the launcher itself raised
            for p in procs:
                if p.is_alive():
                    p.terminate()  # the worker aborts its shard and closes its callbacks
        _drain_until_exit(procs, conns, rundir, index, exiting)
    if failure is not None:
        shard_id, cause, remote_tb = failure
        where = f" on shard {shard_id}" if shard_id else ""
        message = f"stage {index} ({stage.name}) failed{where}: {cause}"
        if remote_tb:
            message += f"\n\nworker traceback:\n{remote_tb}"
        raise StageFailed(message, stage=index, shard_id=shard_id)


def _drain_until_exit(
    procs: list[Any], conns: list[Any], rundir: _RunDir, index: int, exiting: list[Any]
) -> None:
    """Wait until every worker has closed its pipe, reading its last messages so none
    blocks on a full pipe; shards that still completed are marked. Workers stuck past
    the grace period are killed. A worker that closed its pipe has nothing left to do
    but tear its process down, so it goes to ``exiting`` to be reaped later instead of
    being waited for here."""
    deadline = time.monotonic() + _STOP_GRACE_S
    open_conns = list(conns)
    while open_conns and time.monotonic() < deadline:
        ready = mp_connection.wait(open_conns, timeout=0.05)
        if not ready and not any(p.is_alive() for p in procs):
            break  # every worker is gone and nothing is left to read
        for conn in ready:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                open_conns.remove(conn)
                continue
            if message[0] == "done":
                # the stage is already failing here; a marker that cannot be written
                # only means the shard is redone by the next launch of this run
                with contextlib.suppress(OSError):
                    rundir.mark(index, message[3])
    for p, conn in zip(procs, conns, strict=True):
        if conn in open_conns:  # stuck past the grace period
            p.kill()
            p.join(timeout=5)
        exiting.append(p)
        conn.close()


def _reap(exiting: list[Any]) -> None:
    """End the workers that closed their pipes (by now they have normally exited)."""
    for p in exiting:
        if p.is_alive():
            p.kill()
        p.join(timeout=5)


def launch(
    sequence: Any,
    *,
    name: str | None,
    num_workers: int,
    rundir: str | None,
    start_method: str | None = None,
    fresh: bool = False,
    owner_stale_after_s: float = DEFAULT_STALE_AFTER_S,
    progress_timeout_s: float | None = DEFAULT_PROGRESS_TIMEOUT_S,
) -> LaunchStats:
    check_positive("num_workers", num_workers)
    check_progress_timeout(progress_timeout_s)
    if not (isinstance(owner_stale_after_s, int | float) and owner_stale_after_s > 0):
        raise ValueError(
            f"owner_stale_after_s must be a positive number of seconds, got {owner_stale_after_s!r}"
        )
    start_method = resolve_start_method(start_method)
    name = name or "refiner"
    state = _RunDir(rundir, name, num_workers, fresh=fresh)
    stats = LaunchStats(
        name=name, run_id=state.run_id, rundir=None if state.temporary else state.path
    )
    started = time.monotonic()
    exiting: list[Any] = []  # workers done with their stage, reaped when the launch ends
    owners: dict[str, OutputOwnership] = {}
    try:
        state.fingerprint.check_stages(describe_sequence(sequence))
        for stage in sequence.stages:
            sink = getattr(stage, "sink", None)
            if sink is not None and sink.exclusive_owner and sink.url not in owners:
                ownership = OutputOwnership(
                    sink.folder, run_id=state.run_id, stale_after_s=owner_stale_after_s
                )
                try:
                    ownership.acquire()
                except Exception as exc:
                    exc.add_note(
                        f"raised while taking the output folder {sink.url} for {name} "
                        f"(run {state.run_id})"
                    )
                    raise
                owners[sink.url] = ownership
                ownership.start_heartbeats()
        _run_stages(
            sequence,
            stats,
            state,
            name,
            num_workers,
            exiting,
            start_method,
            owners,
            progress_timeout_s,
        )
        for ownership in owners.values():  # a takeover the heartbeat saw fails the launch
            ownership.check()
    finally:
        _reap(exiting)
        for ownership in owners.values():
            ownership.release()
        state.cleanup()
    stats.elapsed_s = round(time.monotonic() - started, 3)
    return stats


def _lease(owners: dict[str, OutputOwnership], stage: Any) -> Lease | None:
    """The launch's lease on the stage's output folder (checked first), if it has one."""
    sink = getattr(stage, "sink", None)
    ownership = owners.get(sink.url) if sink is not None else None
    if ownership is None:
        return None
    ownership.check()
    return ownership.lease()


def _run_stages(
    sequence: Any,
    stats: LaunchStats,
    state: _RunDir,
    name: str,
    num_workers: int,
    exiting: list[Any],
    start_method: str,
    owners: dict[str, OutputOwnership],
    progress_timeout_s: float | None,
) -> None:
    writes: dict[int, int] = {}  # id of a write stage's sink -> the stage's index
    for index, stage in enumerate(sequence.stages):
        stage_started = time.monotonic()
        st = StageStats(index=index, kind=stage.kind, name=stage.name)
        stats.stages.append(st)
        label = f"{name} stage {index}: {stage.name}"
        lease = _lease(owners, stage)
        if isinstance(stage, ReduceStage):
            write_index = writes.get(id(stage.sink))
            accepted = None
            if write_index is not None:  # the attempts this run dir accepted, no others
                done = state.completed(write_index)
                accepted = {shard_id: m.attempt_id for shard_id, m in done.items()}
            try:
                st.summary = stage.run(run_id=state.run_id, lease=lease, accepted=accepted)
            except Exception as exc:
                exc.add_note(f"raised by {label} (run {state.run_id})")
                raise
            stats.summary = st.summary
            st.rows = st.summary.counters.get("rows_written", 0)
            st.bytes = st.summary.counters.get("bytes_written", 0)
            progress = StageProgress(label, 1, rate=False, started=stage_started)
            progress.update(rows=st.rows, nbytes=st.bytes, shards=1)
            progress.close()
        else:
            if isinstance(stage, WriteStage):
                writes[id(stage.sink)] = index
            try:
                shards = stage.plan(run_id=state.run_id, workers=state.plan_workers)
            except Exception as exc:
                exc.add_note(f"raised while planning {label} (run {state.run_id})")
                raise
            state.fingerprint.check_shards(index, describe_stage(stage), shards)
            done = state.completed(index)
            todo = [s for s in shards if s.id not in done]
            st.shards, st.shards_skipped = len(shards), len(shards) - len(todo)
            progress = StageProgress(label, len(shards))
            progress.update(shards=st.shards_skipped)
            try:
                if todo:
                    _run_sharded(
                        stage,
                        index,
                        todo,
                        num_workers,
                        state.run_id,
                        state,
                        progress,
                        exiting,
                        start_method,
                        lease,
                        progress_timeout_s,
                    )
            finally:
                progress.close()
            for manifest in state.completed(index).values():
                counters = manifest.counters
                st.rows += counters.get("rows_written", 0)
                st.bytes += counters.get("bytes_written", 0)
        st.elapsed_s = round(time.monotonic() - stage_started, 3)

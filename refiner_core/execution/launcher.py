"""``launch_local``: stages in order, sharded stages spread over worker processes.

The pieces: :mod:`.rundir` (what a relaunch resumes), :mod:`.pool` (the worker
processes of one stage), :mod:`.worker_process` (what each of them runs) and
:mod:`.messages` (what they tell the launcher).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..io.ownership import DEFAULT_STALE_AFTER_S, Lease, OutputOwnership
from ..manifests import DatasetSummary
from ..validation import check_positive
from .fingerprint import describe_sequence, describe_stage
from .in_launcher import run_in_launcher, runs_in_launcher
from .pool import WorkerPool, reap
from .progress import StageProgress
from .protocols import ReduceStage
from .rundir import RunDir
from .stages import WriteStage
from .start_methods import resolve_start_method
from .watchdog import DEFAULT_PROGRESS_TIMEOUT_S, check_progress_timeout


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
    in_process: bool = False  # its shards ran in the launching process (.in_launcher)


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
        data["summary"] = _summary_json(self.summary)
        for entry, stage in zip(data["stages"], self.stages, strict=True):
            entry["summary"] = _summary_json(stage.summary)
        return data


def _summary_json(summary: DatasetSummary | None) -> dict[str, Any] | None:
    return summary.to_json() if summary is not None else None


@dataclass
class _Launch:
    """One call of :func:`launch`: its settings and what it holds while it runs."""

    name: str
    num_workers: int
    start_method: str
    progress_timeout_s: float | None
    state: RunDir
    stats: LaunchStats
    start_method_given: bool = False
    owners: dict[str, OutputOwnership] = field(default_factory=dict)
    exiting: list[Any] = field(default_factory=list)  # workers to reap when the launch ends
    writes: dict[int, int] = field(default_factory=dict)  # id of a write's sink -> its index

    def label(self, index: int, stage: Any) -> str:
        return f"{self.name} stage {index}: {stage.name}"

    def lease(self, stage: Any) -> Lease | None:
        """The launch's lease on the stage's output folder (checked first), if it has one."""
        sink = getattr(stage, "sink", None)
        ownership = self.owners.get(sink.url) if sink is not None else None
        if ownership is None:
            return None
        ownership.check()
        return ownership.lease()


def _check_settings(
    num_workers: int, owner_stale_after_s: float, progress_timeout_s: float | None
) -> None:
    check_positive("num_workers", num_workers)
    check_progress_timeout(progress_timeout_s)
    if not (isinstance(owner_stale_after_s, int | float) and owner_stale_after_s > 0):
        raise ValueError(
            f"owner_stale_after_s must be a positive number of seconds, got {owner_stale_after_s!r}"
        )


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
    """Run ``sequence``'s stages in order; see ``PipelineSequence.launch_local``."""
    _check_settings(num_workers, owner_stale_after_s, progress_timeout_s)
    given = start_method is not None
    start_method = resolve_start_method(start_method)
    name = name or "refiner"
    state = RunDir(rundir, name, num_workers, fresh=fresh)
    stats = LaunchStats(name=name, run_id=state.run_id, rundir=state.path)
    run = _Launch(name, num_workers, start_method, progress_timeout_s, state, stats, given)
    started = time.monotonic()
    try:
        if state.fingerprint is not None:
            state.fingerprint.check_stages(describe_sequence(sequence))
        _take_outputs(run, sequence, owner_stale_after_s)
        for index, stage in enumerate(sequence.stages):
            _run_stage(run, index, stage)
        for ownership in run.owners.values():  # a takeover the heartbeat saw fails the launch
            ownership.check()
    finally:
        reap(run.exiting)
        for ownership in run.owners.values():
            ownership.release()
    stats.elapsed_s = round(time.monotonic() - started, 3)
    return stats


def _take_outputs(run: _Launch, sequence: Any, stale_after_s: float) -> None:
    """Own every output folder a stage writes exclusively, for the whole launch."""
    for stage in sequence.stages:
        sink = getattr(stage, "sink", None)
        if sink is None or not sink.exclusive_owner or sink.url in run.owners:
            continue
        ownership = OutputOwnership(
            sink.folder, run_id=run.state.run_id, stale_after_s=stale_after_s
        )
        try:
            ownership.acquire()
        except Exception as exc:
            exc.add_note(
                f"raised while taking the output folder {sink.url} for {run.name} "
                f"(run {run.state.run_id})"
            )
            raise
        run.owners[sink.url] = ownership
        ownership.start_heartbeats()


def _run_stage(run: _Launch, index: int, stage: Any) -> None:
    started = time.monotonic()
    st = StageStats(index=index, kind=stage.kind, name=stage.name)
    run.stats.stages.append(st)
    if isinstance(stage, ReduceStage):
        _finalize(run, index, stage, st, started)
    else:
        if isinstance(stage, WriteStage):
            run.writes[id(stage.sink)] = index
        _run_shards(run, index, stage, st)
    st.elapsed_s = round(time.monotonic() - started, 3)


def _finalize(run: _Launch, index: int, stage: Any, st: StageStats, started: float) -> None:
    """Run a finalization stage in the launcher, on the attempts this run dir accepted."""
    lease = run.lease(stage)
    write_index = run.writes.get(id(stage.sink))
    accepted = None
    if write_index is not None:  # the attempts this run dir accepted, no others
        done = run.state.completed(write_index)
        accepted = {shard_id: m.attempt_id for shard_id, m in done.items()}
    try:
        summary = stage.run(run_id=run.state.run_id, lease=lease, accepted=accepted)
    except Exception as exc:
        exc.add_note(f"raised by {run.label(index, stage)} (run {run.state.run_id})")
        raise
    st.summary = run.stats.summary = summary
    st.rows = summary.counters.get("rows_written", 0)
    st.bytes = summary.counters.get("bytes_written", 0)
    progress = StageProgress(run.label(index, stage), 1, rate=False, started=started)
    progress.update(rows=st.rows, nbytes=st.bytes, shards=1)
    progress.close()


def _run_shards(run: _Launch, index: int, stage: Any, st: StageStats) -> None:
    """Plan a sharded stage and run the shards the run dir has not completed yet."""
    label = run.label(index, stage)
    lease = run.lease(stage)
    try:
        shards = stage.plan(run_id=run.state.run_id, workers=run.state.plan_workers)
    except Exception as exc:
        exc.add_note(f"raised while planning {label} (run {run.state.run_id})")
        raise
    if run.state.fingerprint is not None:
        run.state.fingerprint.check_shards(index, describe_stage(stage), shards)
    done = run.state.completed(index)
    todo = [s for s in shards if s.id not in done]
    st.shards, st.shards_skipped = len(shards), len(shards) - len(todo)
    progress = StageProgress(label, len(shards))
    progress.update(shards=st.shards_skipped)
    try:
        if todo and runs_in_launcher(
            stage, todo, num_workers=run.num_workers, start_method_given=run.start_method_given
        ):
            st.in_process = True
            run_in_launcher(
                stage,
                index,
                todo,
                run_id=run.state.run_id,
                rundir=run.state,
                progress=progress,
                lease=lease,
            )
        elif todo:
            pool = WorkerPool(
                stage,
                index,
                run_id=run.state.run_id,
                rundir=run.state,
                progress=progress,
                exiting=run.exiting,
                start_method=run.start_method,
                lease=lease,
                progress_timeout_s=run.progress_timeout_s,
            )
            pool.run(todo, run.num_workers)
    finally:
        progress.close()
    for manifest in run.state.completed(index).values():
        st.rows += manifest.counters.get("rows_written", 0)
        st.bytes += manifest.counters.get("bytes_written", 0)

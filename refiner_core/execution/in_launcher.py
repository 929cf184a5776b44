"""Small jobs: a stage whose work is one shard of refiner's own code runs in the launcher.

Starting a worker process costs more than a small job itself: a fork, the pages both
processes then copy on write, a pipe, two threads and a reap (on 2 loaded CPUs, packing
1,000 files of 16 KiB took 0.27 s through a worker against 0.11 s in the launching
process). A stage runs its shards in the launching process instead, without any worker,
when all of these hold (:func:`runs_in_launcher`):

- one shard is left to run (so one worker would run it anyway),
- ``num_workers=1`` and the default start method (a ``start_method=`` given asks for
  worker processes),
- the pipeline has no steps: no callback of the user's runs there, so a crash or a hang
  in user code still takes down only a worker,
- the source reads Parquet, JSONL or items, and the stage writes Parquet or JSONL (or
  nothing): the launcher never calls Lance, and runs no third-party source or sink.

Everything else is as with a worker: the attempt writes the same files and manifest,
the run dir records it, the output lease is checked before the manifest is written, and
a failure raises the same :class:`~refiner_core.errors.StageFailed` message.
``launch_local``'s stats say which stages ran this way (``StageStats.in_process``).
There is no progress timeout for such a shard: no user code runs in it.

Example:
    >>> import refiner_core as mdr, tempfile
    >>> out = tempfile.mkdtemp()
    >>> stats = mdr.from_items([{"x": 1}]).write_parquet(out).launch_local()
    >>> stats.stages[0].in_process, stats.stages[1].in_process
    (True, False)
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Any

from ..errors import StageFailed
from ..io.ownership import Lease
from .messages import Failure
from .progress import StageProgress
from .rundir import RunDir
from .stages import ShardedStage, WriteStage
from .worker import WorkerContext
from .worker_process import describe

SOURCES_RUN_HERE = frozenset(
    {"refiner_core.sources.parquet", "refiner_core.sources.jsonl", "refiner_core.sources.items"}
)
FORMATS_WRITTEN_HERE = frozenset({"parquet", "jsonl"})


def runs_in_launcher(
    stage: ShardedStage, todo: list[Any], *, num_workers: int, start_method_given: bool
) -> bool:
    """Whether ``stage``'s ``todo`` shards run in the launching process (the module's rule)."""
    if len(todo) != 1 or num_workers != 1 or start_method_given:
        return False
    pipeline = stage.pipeline
    if pipeline.steps or type(pipeline.source).__module__ not in SOURCES_RUN_HERE:
        return False
    if isinstance(stage, WriteStage):
        return stage.sink.format in FORMATS_WRITTEN_HERE
    return type(stage) is ShardedStage


def run_in_launcher(
    stage: ShardedStage,
    index: int,
    todo: list[Any],
    *,
    run_id: str,
    rundir: RunDir,
    progress: StageProgress,
    lease: Lease | None,
) -> None:
    """Run ``todo`` here, one shard after another, recording each completed one in
    ``rundir``; raises :class:`StageFailed` as the worker pool would."""
    worker = WorkerContext()
    current: str | None = None
    try:
        for shard in todo:
            current = shard.id
            manifest = stage.run_shard(
                shard, run_id=run_id, worker=worker, progress=_reporter(progress), lease=lease
            )
            rundir.mark(index, manifest)
            progress.update(shards=1)
            current = None
    except BaseException as exc:  # an interrupt, too, closes the loop and its callbacks
        with contextlib.suppress(Exception):  # the shard's error is the one to report
            worker.close()
        if isinstance(exc, Exception):
            raise _failed(stage, index, current, exc) from exc
        raise
    try:
        worker.close()
    except Exception as exc:
        raise _failed(stage, index, None, exc) from exc


def _reporter(progress: StageProgress) -> Any:
    def report(rows: int, nbytes: int) -> None:
        progress.update(rows=rows, nbytes=nbytes)

    return report


def _failed(stage: ShardedStage, index: int, shard_id: str | None, exc: Exception) -> StageFailed:
    failure = Failure(shard_id, describe(exc), traceback.format_exc())
    return StageFailed(failure.message(index, stage.name), stage=index, shard_id=shard_id)

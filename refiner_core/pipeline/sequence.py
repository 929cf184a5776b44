"""``PipelineSequence``: stages run in order, a writer's finalization included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..execution.protocols import ReduceStage
from ..execution.stages import ShardedStage, WriteStage
from ..execution.watchdog import DEFAULT_PROGRESS_TIMEOUT_S
from ..io.ownership import DEFAULT_STALE_AFTER_S
from ..manifests import DatasetSummary
from ..row import Row
from ..sinks.finalize import FinalizeStage


class PipelineSequence:
    """Ordered stages: writes (sharded) and finalizations (reducers), run by a launcher.

    A writer returns one with its finalization stages already appended; ``then``
    adds a pipeline or another sequence after it.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp()
        >>> seq = mdr.from_items([{"x": 1}, {"x": 2}]).write_parquet(out)
        >>> [stage.kind for stage in seq.stages]
        ['write', 'finalize']
        >>> seq.launch_local(num_workers=1).summary.counters["rows_written"]
        2

    Running the stages one by one (what a scheduler such as Dagster does)::

        >>> stage = seq.write_stage
        >>> manifests = stage.run_task(stage.plan("0123456789ab"), run_id="0123456789ab")
        >>> seq.finalize("0123456789ab").rows_written
        2

    Previewing the rows a writer would write, without writing anything::

        >>> mdr.from_items([{"x": 1}, {"x": 2}]).write_parquet(out).take(1)
        [Row({'x': 1})]
    """

    def __init__(self, stages: list[Any]) -> None:
        self.stages = list(stages)

    @classmethod
    def of(cls, pipeline: Any) -> PipelineSequence:
        return cls([ShardedStage(pipeline)])

    @classmethod
    def for_sink(cls, pipeline: Any, sink: Any) -> PipelineSequence:
        return cls([WriteStage(pipeline, sink), FinalizeStage(sink)])

    def __repr__(self) -> str:
        return f"PipelineSequence({[s.name for s in self.stages]!r})"

    def then(self, other: Any) -> PipelineSequence:
        """Append a pipeline (run, rows discarded) or a sequence (its stages)."""
        from .pipeline import Pipeline

        if isinstance(other, PipelineSequence):
            return PipelineSequence([*self.stages, *other.stages])
        if isinstance(other, Pipeline):
            return PipelineSequence([*self.stages, ShardedStage(other)])
        raise TypeError(f"then() takes a Pipeline or PipelineSequence, got {type(other).__name__}")

    @property
    def write_stage(self) -> WriteStage:
        """The write stage a writer's sequence starts with (its shards write the output)."""
        first = self.stages[0] if self.stages else None
        if not isinstance(first, WriteStage):
            kind = f"a {first.kind!r} stage" if first is not None else "no stage"
            raise ValueError(
                f"{self!r} starts with {kind}, not a write; build it with "
                "pipeline.write_parquet(...) (or write_jsonl / write_lance)"
            )
        return first

    @property
    def finalize_stages(self) -> list[Any]:
        """The finalization stages that follow the write stage (the writer appended them)."""
        self.write_stage  # noqa: B018  (raises when the sequence is not a writer's)
        stages = []
        for stage in self.stages[1:]:
            if not isinstance(stage, ReduceStage):
                break
            stages.append(stage)
        return stages

    def finalize(self, run_id: str, *, persisted: Any = None) -> DatasetSummary:
        """Run the write stage's finalization for engine run ``run_id``, once its shards ran.

        Reads only the manifests the attempts persisted, so any process may call it;
        returns the summary it also wrote to ``<output>/_refiner/summary.json``.
        ``persisted`` (:class:`~refiner_core.manifests.PersistedManifests`) saves reading
        them again when the caller already has.
        """
        summary = None
        for stage in self.finalize_stages:
            summary = stage.run(run_id=run_id, persisted=persisted)
            persisted = None  # the first stage may have removed some: later ones list again
        if summary is None:
            raise ValueError(f"{self!r} has no finalization stage after its write stage")
        return summary

    # previews -----------------------------------------------------------------
    def iter_rows(self) -> Iterator[Row]:
        """The rows the write stage would write, run in this process with nothing
        written (no sink, no assets copied, no finalization): the write stage's
        pipeline's :meth:`~refiner_core.Pipeline.iter_rows`."""
        return self.write_stage.pipeline.iter_rows()

    def take(self, n: int) -> list[Row]:
        """The first ``n`` rows the write stage would write; nothing is written."""
        return self.write_stage.pipeline.take(n)

    def materialize(self) -> list[Row]:
        """Every row the write stage would write, as a list; nothing is written."""
        return self.write_stage.pipeline.materialize()

    @property
    def output(self) -> str | None:
        """Where the first write stage writes, if any."""
        for stage in self.stages:
            if isinstance(stage, WriteStage):
                return stage.sink.url
        return None

    def launch_local(
        self,
        *,
        name: str | None = None,
        num_workers: int = 1,
        rundir: str | None = None,
        start_method: str | None = None,
        fresh: bool = False,
        owner_stale_after_s: float = DEFAULT_STALE_AFTER_S,
        progress_timeout_s: float | None = DEFAULT_PROGRESS_TIMEOUT_S,
    ):
        """Run every stage in order with ``num_workers`` worker processes.

        Completed shards recorded in ``rundir`` are not redone when the same run is
        launched again (it is planned for the worker count of its first launch).
        ``start_method`` is how workers start: ``"fork"`` (the default where it is
        safe), ``"forkserver"`` or ``"spawn"``; the last two receive the stages pickled
        with cloudpickle, and a script using them must guard its entry point with
        ``if __name__ == "__main__":`` as any multiprocessing program does.

        The run dir records a fingerprint of the pipeline (its stages, steps, sinks and
        planned shards): launching a different pipeline on it raises
        :class:`~refiner_core.execution.fingerprint.RunDirMismatch` naming what
        differs, unless ``fresh=True``, which discards the run dir's progress and starts
        a new run.

        While it runs, the launch owns each output folder it writes
        (``<output>/_refiner/owners/``): another launch on a folder it owns fails at
        once with :class:`~refiner_core.io.ownership.OutputFolderBusy`. A launch that
        died (its process gone on this machine, or no heartbeat for
        ``owner_stale_after_s`` seconds, 120 by default) is taken over.

        A worker that sends no progress for ``progress_timeout_s`` seconds (1800 by
        default; it reports after every block of rows it writes) is taken as hung: it
        is killed and the stage fails naming the worker and its shard. ``None`` waits
        forever. Returns :class:`LaunchStats` with the finalization summary.

        A small job starts no worker: a stage with one shard left to run, no steps,
        a Parquet, JSONL or items source and a Parquet or JSONL output, launched with
        ``num_workers=1`` and no ``start_method``, runs that shard in this process
        (``stats.stages[i].in_process``; :mod:`refiner_core.execution.in_launcher`).
        """
        from ..execution.launcher import launch

        return launch(
            self,
            name=name,
            num_workers=num_workers,
            rundir=rundir,
            start_method=start_method,
            fresh=fresh,
            owner_stale_after_s=owner_stale_after_s,
            progress_timeout_s=progress_timeout_s,
        )

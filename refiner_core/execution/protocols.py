"""The stage contract: what a launcher (``launch_local``, Dagster ops) asks of a stage.

A ``PipelineSequence`` is a list of stages. A :class:`ShardStage` is planned into
shards that workers run independently, each shard attempt returning its
:class:`~refiner_core.manifests.AttemptManifest`; a :class:`ReduceStage` runs once,
after the stages before it, over what they persisted. Launchers tell them apart by
type (``isinstance(stage, ReduceStage)``); ``kind`` (``"write"``, ``"run"``,
``"finalize"``) only labels a stage in stats and progress.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.execution.protocols import ReduceStage, ShardStage
    >>> seq = mdr.from_items([{"x": 1}]).write_parquet(tempfile.mkdtemp())
    >>> [isinstance(s, ShardStage) for s in seq.stages], isinstance(seq.stages[1], ReduceStage)
    ([True, False], True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..manifests import AttemptManifest, DatasetSummary


@runtime_checkable
class ShardStage(Protocol):
    """A stage split into shards; ``plan`` runs once, then any process may run shards."""

    kind: str
    name: str

    def plan(self, run_id: str, workers: int = 1) -> list[Any]:
        """The shards of this run (and anything the stage sets up before they run), for
        ``workers`` processes sharing them."""

    def run_task(
        self, shards: list[Any], *, run_id: str, attempt_id: str | None = None
    ) -> list[AttemptManifest]:
        """Run ``shards`` one after another in this process; one manifest each (every
        attempt named ``attempt_id`` when given)."""

    def run_shard(
        self,
        shard: Any,
        *,
        run_id: str,
        worker: Any,
        progress: Callable[[int, int], None] | None = None,
        attempt_id: str | None = None,
        lease: Any = None,
    ) -> AttemptManifest:
        """Run one attempt of ``shard`` on a worker context and persist its manifest
        (only while ``lease``, the launch's ownership of the output folder, holds)."""


@runtime_checkable
class ReduceStage(Protocol):
    """A stage that runs once, after its shard stage, from what the attempts persisted."""

    kind: str
    name: str

    def run(
        self,
        run_id: str,
        *,
        lease: Any = None,
        accepted: dict[str, str] | None = None,
        persisted: Any = None,
    ) -> DatasetSummary:
        """Reduce the run's attempts (keep one per shard, commit, clean up) and summarize.

        ``lease`` is the launch's ownership of the output folder (without one the stage
        takes it for its own duration); ``accepted`` names the attempt to keep per shard;
        ``persisted`` is the output's manifest folder already read, if the caller has it."""


Stage = ShardStage | ReduceStage

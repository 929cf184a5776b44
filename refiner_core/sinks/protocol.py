"""The sink contract: everything the write and finalization stages ask of a sink.

A new output format is one module with a class implementing :class:`Sink` (usually a
subclass of :class:`~refiner_core.sinks.files.FileSink`, which brings the output
folder, ``assets=``, file names and cleanup) and one entry in
``refiner_core.sinks.SINKS``, the name ``pipeline.write(format, ...)`` takes.

The write stage calls :meth:`Sink.prepare` once, then per shard attempt
:meth:`Sink.open_attempt` and the :class:`AttemptWriter`'s ``write``/``close``, whose
:class:`~refiner_core.manifests.AttemptResult` becomes the attempt's manifest.
Finalization (:func:`~refiner_core.sinks.finalize.finalize_output`) then calls
:meth:`Sink.commit` with the kept attempts, :meth:`Sink.write_empty_result` and
:meth:`Sink.remove_leftovers`.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.sinks import Sink, make_sink
    >>> sink = make_sink("jsonl", tempfile.mkdtemp())
    >>> isinstance(sink, Sink), sink.describe().startswith("write_jsonl ")
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from ..io.datafile import DataFolder
from ..manifests import AttemptManifest, AttemptResult
from .assets import AssetConfig

AttemptKey = tuple[str, str]
"""``(shard_id, attempt_id)``."""


@dataclass
class Leftovers:
    """What :meth:`Sink.remove_leftovers` deleted: the attempts it rejected, and how many
    files and folders it removed."""

    rejected: set[AttemptKey] = field(default_factory=set)
    removed: int = 0


@dataclass(frozen=True)
class Committed:
    """What :meth:`Sink.commit` made visible: ``record``, the JSON the summary keeps as
    ``commit`` (Lance: the version it committed), and ``files``, the data files a sink
    that names them only at commit wrote (LeRobot), relative to its folder.

    Example:
        >>> Committed({"version": 3}).files
        ()
    """

    record: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()


@runtime_checkable
class AttemptWriter(Protocol):
    """Writes one shard attempt; the write stage calls ``write`` per block, then
    ``close`` (or ``abort`` on failure, after which nothing of the attempt is visible).

    ``empty_schema`` is the columns of an attempt that wrote no rows, when known (the
    write stage sets it from the source when no block told it)."""

    empty_schema: pa.Schema | None

    async def write(self, table: pa.Table) -> None:
        """Accept one Arrow block of the shard, in order."""

    async def close(self) -> AttemptResult:
        """Finish the attempt; returns what it wrote (the manifest's files, asset
        folders, counters and sink ``extra``)."""

    async def abort(self) -> None:
        """Remove what the attempt wrote so far."""


@runtime_checkable
class Sink(Protocol):
    """Where a write stage writes. ``folder`` is the output folder, ``assets`` the
    ``assets=`` config (or ``None``), ``format`` the registered name,
    ``arrow_block_rows`` the block size it prefers (``None``: the engine's), and
    ``exclusive_owner`` whether one run at a time owns the folder (then finalization
    may delete any other run's attempts; else only its own run's)."""

    format: str
    folder: DataFolder
    assets: AssetConfig | None
    arrow_block_rows: int | None
    exclusive_owner: bool

    @property
    def url(self) -> str:
        """The output folder's URL."""

    def describe(self) -> str:
        """A label for progress and errors, e.g. ``write_parquet /data/out``."""

    def prepare(self, run_id: str) -> None:
        """Called once when the write stage is planned, before any attempt."""

    def open_attempt(self, shard_id: str, attempt_id: str, run_id: str) -> AttemptWriter:
        """The writer of one shard attempt."""

    def commit(self, committed: list[AttemptManifest], run_id: str) -> Committed:
        """Make the kept attempts (one per shard, by shard id) visible, once per run
        (``Committed()``: nothing to do)."""

    def write_empty_result(self, committed: dict[str, AttemptManifest]) -> list[str]:
        """When no kept attempt wrote a data file, write what makes the output read back
        as empty; returns the files written (relative to ``folder``)."""

    def remove_leftovers(
        self, keep: set[AttemptKey], run_id: str, check: Callable[[], None]
    ) -> Leftovers:
        """Delete files and folders of attempts not in ``keep`` that no manifest names
        (attempts that crashed), calling ``check`` before each deletion batch."""

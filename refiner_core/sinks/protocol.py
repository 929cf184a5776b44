"""The sink contract: what the write and finalization stages ask of a sink.

A new output format is one module with a class implementing :class:`Sink` (usually a
subclass of :class:`~refiner_core.sinks.files.FolderSink`, which brings the output
folder, ``assets=`` and the finalization stage) and one entry in
``refiner_core.sinks.SINKS``, the name ``pipeline.write(format, ...)`` takes.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.sinks import Sink, make_sink
    >>> sink = make_sink("jsonl", tempfile.mkdtemp())
    >>> isinstance(sink, Sink), sink.describe().startswith("write_jsonl ")
    (True, True)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import pyarrow as pa


@runtime_checkable
class AttemptWriter(Protocol):
    """Writes one shard attempt; the write stage calls ``write`` per block, then
    ``close`` (or ``abort`` on failure, after which nothing of the attempt is visible)."""

    async def write(self, table: pa.Table) -> None:
        """Accept one Arrow block of the shard, in order."""

    async def close(self) -> dict[str, Any]:
        """Finish the attempt; returns what it wrote: ``files`` and ``asset_dirs``
        (relative to the output), ``counters`` and sink ``extra`` (the manifest's)."""

    async def abort(self) -> None:
        """Remove what the attempt wrote so far."""


@runtime_checkable
class Sink(Protocol):
    """Where a write stage writes. ``folder`` is the output's ``DataFolder``, ``assets``
    the ``assets=`` config (or ``None``), ``format`` the registered name, and
    ``arrow_block_rows`` the block size it prefers (``None``: the engine's)."""

    format: str
    folder: Any
    assets: Any
    arrow_block_rows: int | None

    def describe(self) -> str:
        """A label for progress and errors, e.g. ``write_parquet /data/out``."""

    def prepare(self, run_id: str) -> None:
        """Called once when the write stage is planned, before any attempt."""

    def open_attempt(self, shard_id: str, attempt_id: str, run_id: str) -> AttemptWriter:
        """The writer of one shard attempt."""

    def finalize_stages(self) -> list[Any]:
        """The stages a writer's sequence appends after the write (reducers)."""

"""Sinks: each format is one module implementing :class:`Sink`; register it in ``SINKS``.

``SINKS`` maps the name ``pipeline.write(format, ...)`` takes to a function returning
the sink class (imported lazily, so Lance loads only when used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..manifests import DatasetSummary, PersistedManifests
from .assets import AssetConfig, BlobAssetConfig, FileAssetConfig
from .finalize import FinalizeStage
from .protocol import AttemptWriter, Sink


def _parquet():
    from .parquet import ParquetSink

    return ParquetSink


def _jsonl():
    from .jsonl import JsonlSink

    return JsonlSink


def _lance():
    from .lance import LanceSink

    return LanceSink


def _lerobot():
    from .lerobot import LeRobotSink

    return LeRobotSink


SINKS = {"parquet": _parquet, "jsonl": _jsonl, "lance": _lance}
# Finalization also knows the sinks written by their own method (``write_lerobot``).
FINALIZED_SINKS = {**SINKS, "lerobot": _lerobot}


def make_sink(format: str, output: str, *, finalizing: bool = False, **options: Any) -> Sink:
    """Build the sink registered for ``format`` (``finalizing``: also a LeRobot one)."""
    known = FINALIZED_SINKS if finalizing else SINKS
    if format not in known:
        raise ValueError(f"unknown output format {format!r}; use one of {sorted(known)}")
    sink: Sink = known[format]()(output, **options)
    return sink


def finalize_output(
    format: str,
    output: str,
    run_id: str,
    *,
    assets: AssetConfig | None = None,
    filename_template: str | None = None,
    storage_options: dict[str, Any] | None = None,
    persisted: PersistedManifests | None = None,
    sink_options: Mapping[str, Any] | None = None,
) -> DatasetSummary:
    """Finalize engine run ``run_id`` of the output at ``output``, from what it was
    written with (``format``, ``assets=``, ``filename_template``, and the writer's own
    ``sink_options``, e.g. ``{"fps": 30}`` for ``"lerobot"``): no pipeline needed.

    Reads only the manifests the attempts persisted, so any process may call it once
    the write's shards ran, and again (it is idempotent); returns the summary it wrote
    to ``<output>/_refiner/summary.json``. ``persisted`` saves reading the manifests
    when the caller has them.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp()
        >>> write = mdr.from_items([{"x": 1}, {"x": 2}]).write_parquet(out).write_stage
        >>> _ = write.run_task(write.plan("0123456789ab"), run_id="0123456789ab")
        >>> finalize_output("parquet", out, "0123456789ab").rows_written
        2
    """
    options: dict[str, Any] = {"storage_options": storage_options, **(sink_options or {})}
    if format != "lerobot":  # a LeRobot dataset's clips are its assets
        options["assets"] = assets
    if filename_template is not None:
        options["filename_template"] = filename_template
    sink = make_sink(format, output, finalizing=True, **options)
    return FinalizeStage(sink).run(run_id, persisted=persisted)


__all__ = [
    "FINALIZED_SINKS",
    "SINKS",
    "AttemptWriter",
    "BlobAssetConfig",
    "FileAssetConfig",
    "FinalizeStage",
    "Sink",
    "finalize_output",
    "make_sink",
]

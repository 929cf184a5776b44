"""Sinks: each format is one module implementing :class:`Sink`; register it in ``SINKS``.

``SINKS`` maps the name ``pipeline.write(format, ...)`` takes to a function returning
the sink class (imported lazily, so Lance loads only when used).
"""

from __future__ import annotations

from typing import Any

from ..vocabulary import Format
from .assets import BlobAssetConfig, FileAssetConfig
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


SINKS = {"parquet": _parquet, "jsonl": _jsonl, "lance": _lance}


def make_sink(format: Format, output: str, **options: Any) -> Any:
    """Build the sink registered for ``format``."""
    if format not in SINKS:
        raise ValueError(f"unknown output format {format!r}; use one of {sorted(SINKS)}")
    return SINKS[format]()(output, **options)


__all__ = [
    "SINKS",
    "AttemptWriter",
    "BlobAssetConfig",
    "FileAssetConfig",
    "FinalizeStage",
    "Sink",
    "make_sink",
]

"""Dagster metadata from the engine's persisted counters (manifests and ``summary.json``).

The same key names are used everywhere (output metadata of a dataset asset,
materialization metadata of its finalization asset, op outputs), so a UI plot or
an asset check can follow one number across runs.

Example:
    >>> from refiner_core import DatasetSummary
    >>> from refiner_dagster.metadata import summary_metadata
    >>> summary = DatasetSummary(output="/data/out", format="parquet", run_id="r1",
    ...     counters={"rows_written": 3, "blocks_written": 1, "block_bytes": 9})
    >>> md = summary_metadata(summary)
    >>> md["dagster/row_count"].value, md["blocks_written"].value
    (3, 1)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from refiner_core.manifests import (
    BYTE_COUNTER_KEYS,
    COUNTER_KEYS,
    FINALIZE_COUNTER_KEYS,
    DatasetSummary,
    human_bytes,
)

_LABELS = {
    "files_written": "Table files",
    "bytes_written": "Table bytes",
    "blocks_written": "Blocks",
    "bytes_range_copied": "Bytes copied by range",
    "cells_nulled": "Cells set to null",
}

# (summary key, label in the markdown table): the engine's counters, then what only a
# finalization records.
SUMMARY_COUNTERS: tuple[tuple[str, str], ...] = tuple(
    (key, _LABELS.get(key, key.replace("_", " ").capitalize()))
    for key in (*COUNTER_KEYS, *FINALIZE_COUNTER_KEYS)
)


def _int(summary: Mapping[str, Any], key: str) -> int:
    value = summary.get(key, 0)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def summary_markdown(summary: DatasetSummary) -> str:
    """A short markdown table of the counters (zero rows of optional counters left out)."""
    always = {"rows_written", "assets_written", "blocks_written", "block_bytes", "missing_assets"}
    lines = ["| Counter | Value |", "| --- | ---: |"]
    totals = summary.totals
    for key, label in SUMMARY_COUNTERS:
        value = _int(totals, key)
        if value == 0 and key not in always:
            continue
        shown = f"{value:,}" + (f" ({human_bytes(value)})" if key in BYTE_COUNTER_KEYS else "")
        lines.append(f"| {label} | {shown} |")
    policy = summary.missing_policy
    if policy:
        lines.append(f"| Missing policy | `{policy}` |")
    return "\n".join(lines)


def counters_metadata(
    counters: Mapping[str, Any], *, keys: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """Integer metadata for ``keys`` (default: every summary counter), plus ``dagster/row_count``."""
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(_int(counters, "rows_written"))
    }
    for key in keys if keys is not None else [k for k, _ in SUMMARY_COUNTERS]:
        metadata[key] = dg.MetadataValue.int(_int(counters, key))
    return metadata


def summary_metadata(summary: DatasetSummary, *, uri: str | None = None) -> dict[str, Any]:
    """Materialization metadata of a finalization: every counter, the policy, a table."""
    metadata = counters_metadata(summary.totals)
    if uri or summary.output:
        metadata["dagster/uri"] = dg.MetadataValue.path(uri or summary.output)
    if summary.run_id:
        metadata["refiner/run_id"] = dg.MetadataValue.text(summary.run_id)
    if summary.format:
        metadata["refiner/format"] = dg.MetadataValue.text(summary.format)
    if summary.asset_mode:
        metadata["refiner/asset_mode"] = dg.MetadataValue.text(summary.asset_mode)
    if summary.missing_policy:
        metadata["refiner/missing_policy"] = dg.MetadataValue.text(summary.missing_policy)
    metadata["summary"] = dg.MetadataValue.md(summary_markdown(summary))
    return metadata

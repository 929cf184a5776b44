"""Dagster metadata from the engine's persisted counters (manifests and ``summary.json``).

The same key names are used everywhere (output metadata of a dataset asset,
materialization metadata of its finalization asset, op outputs), so a UI plot or
an asset check can follow one number across runs.

Example:
    >>> from refiner_dagster.metadata import summary_metadata
    >>> md = summary_metadata({"rows_written": 3, "blocks_written": 1, "block_bytes": 9})
    >>> md["dagster/row_count"].value, md["blocks_written"].value
    (3, 1)
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from refiner_core.execution.attempts import COUNTER_KEYS
from refiner_core.execution.progress import human_bytes

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
    for key in (*COUNTER_KEYS, "rejected_attempts_removed", "files_removed", "shards")
)

_BYTE_KEYS = {
    "bytes_written",
    "asset_bytes",
    "block_bytes",
    "bytes_coalesced",
    "bytes_range_copied",
    "bytes_deduplicated",
}


def _int(summary: dict[str, Any], key: str) -> int:
    value = summary.get(key, 0)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def summary_markdown(summary: dict[str, Any]) -> str:
    """A short markdown table of the counters (zero rows of optional counters left out)."""
    always = {"rows_written", "assets_written", "blocks_written", "block_bytes", "missing_assets"}
    lines = ["| Counter | Value |", "| --- | ---: |"]
    for key, label in SUMMARY_COUNTERS:
        value = _int(summary, key)
        if value == 0 and key not in always:
            continue
        shown = f"{value:,}" + (f" ({human_bytes(value)})" if key in _BYTE_KEYS else "")
        lines.append(f"| {label} | {shown} |")
    policy = summary.get("missing_policy")
    if policy:
        lines.append(f"| Missing policy | `{policy}` |")
    return "\n".join(lines)


def counters_metadata(
    counters: dict[str, Any], *, keys: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """Integer metadata for ``keys`` (default: every summary counter), plus ``dagster/row_count``."""
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(_int(counters, "rows_written"))
    }
    for key in keys if keys is not None else [k for k, _ in SUMMARY_COUNTERS]:
        metadata[key] = dg.MetadataValue.int(_int(counters, key))
    return metadata


def summary_metadata(summary: dict[str, Any], *, uri: str | None = None) -> dict[str, Any]:
    """Materialization metadata of a finalization: every counter, the policy, a table."""
    metadata = counters_metadata(summary)
    if uri or summary.get("output"):
        metadata["dagster/uri"] = dg.MetadataValue.path(uri or summary["output"])
    if summary.get("run_id"):
        metadata["refiner/run_id"] = dg.MetadataValue.text(str(summary["run_id"]))
    if summary.get("format"):
        metadata["refiner/format"] = dg.MetadataValue.text(str(summary["format"]))
    if summary.get("asset_mode"):
        metadata["refiner/asset_mode"] = dg.MetadataValue.text(str(summary["asset_mode"]))
    if summary.get("missing_policy"):
        metadata["refiner/missing_policy"] = dg.MetadataValue.text(str(summary["missing_policy"]))
    metadata["summary"] = dg.MetadataValue.md(summary_markdown(summary))
    return metadata

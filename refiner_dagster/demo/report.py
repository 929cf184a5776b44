"""Print where the demo's outputs landed, read back from the Dagster instance.

Run after materializing the demo (``scripts/demo.sh`` does both)::

    python -m refiner_dagster.demo.report

It uses the instance under ``$DAGSTER_HOME`` and prints, per demo asset, the latest
materialization's location and counters. Exits 1 if an asset was never materialized.
"""

from __future__ import annotations

import os
import sys

import dagster as dg

from refiner_dagster.demo.data import demo_data_dir
from refiner_dagster.settings import unwrap_metadata

# (asset, counters worth showing for it)
_SHOWN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("episodes", ("dagster/row_count", "frames", "thumbnails")),
    ("labeled_episodes", ("rows_written", "assets_written", "asset_bytes")),
    (
        "episode_dataset_finalized",
        ("rows_written", "assets_written", "blocks_written", "block_bytes"),
    ),
    (
        "episode_dataset_repacked_finalized",
        (
            "rows_written",
            "blobs_coalesced",
            "references_coalesced",
            "bytes_coalesced",
            "ranges_copied",
        ),
    ),
    (
        "episodes_with_gap_finalized",
        ("rows_written", "missing_assets", "cells_nulled", "rows_dropped"),
    ),
)


def latest_metadata(instance: dg.DagsterInstance, asset: str) -> dict[str, object] | None:
    """Raw metadata of ``asset``'s latest materialization, or ``None``."""
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    if event is None or event.asset_materialization is None:
        return None
    return {k: unwrap_metadata(v) for k, v in event.asset_materialization.metadata.items()}


def render(instance: dg.DagsterInstance) -> tuple[str, bool]:
    """The report text, and whether every demo asset has been materialized."""
    lines = [f"Dagster instance: {os.environ.get('DAGSTER_HOME', '(temporary)')}"]
    lines.append(f"Demo source data: {demo_data_dir()}")
    complete = True
    for asset, keys in _SHOWN:
        metadata = latest_metadata(instance, asset)
        if metadata is None:
            complete = False
            lines.append(f"  {asset}: not materialized")
            continue
        counters = ", ".join(f"{k.split('/')[-1]}={metadata[k]}" for k in keys if k in metadata)
        lines.append(f"  {asset}: {counters}")
        if "dagster/uri" in metadata:
            lines.append(f"      -> {metadata['dagster/uri']}")
    return "\n".join(lines), complete


def main() -> int:
    with dg.DagsterInstance.get() as instance:
        text, complete = render(instance)
    print(text)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())

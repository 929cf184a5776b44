"""What every counter of a summary or attempt manifest means.

Example:
    >>> from refiner_core.cli.counters import meaning
    >>> meaning("cells_nulled")
    'cells (or list elements) set to null because their asset was missing (missing_policy="set_null")'
"""

from __future__ import annotations

MEANINGS: dict[str, str] = {
    "shards": "shards written (one kept attempt each)",
    "rows_read": "rows the source produced for the kept attempts",
    "rows_written": "rows in the table files",
    "files_written": "table files (Parquet/JSONL data files or Lance fragments)",
    "bytes_written": "bytes of those table files",
    "assets_written": "media assets copied or packed",
    "asset_bytes": "bytes of those assets",
    "blocks_written": "block files assets were packed into (BlobAssetConfig)",
    "block_bytes": "bytes of those blocks",
    "blobs_coalesced": (
        "source blobs copied whole, once, because the references into them covered every byte"
    ),
    "references_coalesced": "references rewritten into a blob that was copied whole",
    "bytes_coalesced": "bytes copied as whole blobs",
    "ranges_copied": "references copied range by range (no complete cover of their blob)",
    "bytes_range_copied": "bytes copied range by range",
    "missing_assets": "source assets that did not exist",
    "cells_nulled": (
        'cells (or list elements) set to null because their asset was missing (missing_policy="set_null")'
    ),
    "rows_dropped": 'rows removed because an asset was missing (missing_policy="drop_row")',
    "assets_deduplicated": "assets stored once for several cells (dedupe)",
    "bytes_deduplicated": "bytes not stored again thanks to dedupe",
    "frames_written": "video frames written (write_lerobot: the frames of every episode)",
    "clips_remuxed": (
        "episode clips whose packets were copied into a shared video file, not re-encoded"
    ),
    "clips_transcoded": (
        "episode clips decoded and encoded again (their codec, size, pixel format or time "
        "base differed from the file's, or they did not start on a keyframe)"
    ),
    "clip_stats_reused": (
        "remuxed episode clips whose image statistics came with their row "
        "(stats/<camera>/...) instead of being decoded again"
    ),
    "frames_decoded": (
        "video frames write_lerobot decoded (samples for image statistics, and every frame "
        "of a re-encoded clip)"
    ),
    "rejected_attempts_removed": "attempts of other or failed tries whose files finalization deleted",
    "files_removed": "files and folders finalization deleted with those attempts",
    "uploads_aborted": (
        "multipart uploads whose abort had failed and that finalization aborted again"
    ),
}


def meaning(counter: str) -> str:
    """The meaning of ``counter``, or a plain note for one this version does not know."""
    return MEANINGS.get(counter, "(a counter this version of refiner does not describe)")


def counters_of(record: dict) -> dict[str, int]:
    """The integer counters of a summary or manifest, known ones first in glossary order."""
    numbers = {
        k: int(v)
        for k, v in record.items()
        if isinstance(v, int) and not isinstance(v, bool) and k not in ("version",)
    }
    known = [k for k in MEANINGS if k in numbers]
    return {k: numbers[k] for k in [*known, *sorted(set(numbers) - set(known))]}

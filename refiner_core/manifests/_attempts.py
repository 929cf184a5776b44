"""Attempt and run ids, and the manifests attempts persist next to the output."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .values import AttemptManifest

MANIFEST_DIR = "_refiner/attempts"
SUMMARY_PATH = "_refiner/summary.json"
LAYOUT_PATH = "_refiner/layout.json"
ATTEMPT_ID_PATTERN = r"[0-9a-f]{12}"
SHARD_ID_PATTERN = r"\d{5}"

ASSET_COUNTER_KEYS = (
    "assets_written",
    "asset_bytes",
    "blocks_written",
    "block_bytes",
    "blobs_coalesced",
    "references_coalesced",
    "bytes_coalesced",
    "ranges_copied",
    "bytes_range_copied",
    "assets_deduplicated",
    "bytes_deduplicated",
    "missing_assets",
    "cells_nulled",
    "rows_dropped",
)
# Counters of the video writers (write_lerobot).
VIDEO_COUNTER_KEYS = (
    "frames_written",
    "clips_remuxed",
    "clips_transcoded",
    "clip_stats_reused",
    "frames_decoded",
)
COUNTER_KEYS = (
    "rows_read",
    "rows_written",
    "files_written",
    "bytes_written",
    *ASSET_COUNTER_KEYS,
    *VIDEO_COUNTER_KEYS,
)
# Counters that count bytes (shown with human_bytes).
BYTE_COUNTER_KEYS = (
    "bytes_written",
    "asset_bytes",
    "block_bytes",
    "bytes_coalesced",
    "bytes_range_copied",
    "bytes_deduplicated",
)
# Counters only a finalization records (in its summary, next to the summed COUNTER_KEYS).
FINALIZE_COUNTER_KEYS = ("rejected_attempts_removed", "files_removed", "shards", "uploads_aborted")


def new_attempt_id() -> str:
    return uuid.uuid4().hex[:12]


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def attempt_key(shard_id: str, attempt_id: str) -> str:
    return f"{shard_id}__{attempt_id}"


_ATTEMPT_KEY = re.compile(rf"(?P<shard>{SHARD_ID_PATTERN})__(?P<attempt>{ATTEMPT_ID_PATTERN})\Z")


def parse_attempt_key(name: str) -> tuple[str, str] | None:
    """``(shard_id, attempt_id)`` of a name made by :func:`attempt_key`, else ``None``.

    >>> parse_attempt_key(attempt_key("00003", "0123456789ab"))
    ('00003', '0123456789ab')
    """
    match = _ATTEMPT_KEY.match(name)
    return (match["shard"], match["attempt"]) if match else None


def manifest_path(shard_id: str, attempt_id: str) -> str:
    return f"{MANIFEST_DIR}/{attempt_key(shard_id, attempt_id)}.json"


def empty_counters() -> dict[str, int]:
    return dict.fromkeys(COUNTER_KEYS, 0)


def add_counters(total: dict[str, int], part: dict[str, Any]) -> dict[str, int]:
    for key, value in part.items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
    return total


def choose_committed(
    manifests: Iterable[AttemptManifest], run_id: str
) -> dict[str, AttemptManifest]:
    """Per shard of ``run_id``, the attempt that completed first (ties: smallest attempt id)."""
    committed: dict[str, AttemptManifest] = {}
    for m in sorted(manifests, key=lambda m: (m.completed_at, m.attempt_id)):
        if m.run_id == run_id and m.shard_id not in committed:
            committed[m.shard_id] = m
    return committed


def committed_counters(committed: Iterable[AttemptManifest]) -> dict[str, int]:
    """Every counter summed over the given (committed) attempt manifests."""
    totals = empty_counters()
    for manifest in committed:
        add_counters(totals, manifest.counters)
    return totals

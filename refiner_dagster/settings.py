"""Per-asset writer settings: IO manager config, overridden by ``definition_metadata``.

Keys an asset may set in ``metadata=`` (all optional):

=========================  ===================================================
``refiner/format``         ``"parquet"`` (default), ``"jsonl"`` or ``"lance"``
``refiner/target_bytes``   block size target for packed assets (blob IO manager)
``refiner/missing_policy`` ``"error"``, ``"set_null"`` or ``"drop_row"``
``refiner/subdir``         asset folder inside the version folder (``"assets"``)
``refiner/num_workers``    worker processes on the step's machine
``refiner/max_in_flight``  concurrent asset copies per worker
``refiner/finalize_inline`` finalize and publish in the same step (no finalization asset)
``refiner/dedupe``         ``"source"`` or ``"content"``: repeated media stored once (blob IO manager)
``refiner/checksum``       ``"sha256"`` or ``"crc32c"``: checksums in references or a sibling column
=========================  ===================================================

Example:
    >>> from refiner_dagster.settings import resolve_settings
    >>> s = resolve_settings({"format": "parquet", "subdir": "assets", "missing_policy": "error",
    ...                       "target_bytes": 1024, "num_workers": 2, "max_in_flight": 16,
    ...                       "finalize_inline": False},
    ...                      {"refiner/format": "jsonl", "refiner/target_bytes": 64}, where="a")
    >>> s.format, s.target_bytes, s.num_workers
    ('jsonl', 64, 2)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from refiner_core.vocabulary import FORMATS, MISSING_POLICIES, Format, MissingPolicy

METADATA_PREFIX = "refiner/"
SETTING_KEYS = (
    "format",
    "target_bytes",
    "missing_policy",
    "subdir",
    "num_workers",
    "max_in_flight",
    "finalize_inline",
    "dedupe",
    "checksum",
)
# Input metadata key telling the IO manager what to load: see ``io_manager``.
LOAD_KEY = "refiner/load"
# Definition metadata of a finalization asset: the dataset asset it finalizes.
DATASET_KEY = "refiner/dataset"


@dataclass(frozen=True)
class AssetSettings:
    """The writer settings of one asset materialization."""

    format: Format
    subdir: str
    missing_policy: MissingPolicy
    target_bytes: int
    num_workers: int
    max_in_flight: int
    finalize_inline: bool
    dedupe: str | None = None
    checksum: str | None = None


def unwrap_metadata(value: Any) -> Any:
    """Metadata values may arrive wrapped (``MetadataValue``); take the raw value.

    >>> import dagster as dg
    >>> unwrap_metadata(dg.MetadataValue.text("jsonl")), unwrap_metadata(3)
    ('jsonl', 3)
    """
    return getattr(value, "value", value)


def _positive_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{where}: metadata {METADATA_PREFIX}{key}={value!r} must be a positive integer"
        )
    return value


def resolve_settings(
    defaults: dict[str, Any], metadata: dict[str, Any] | None, *, where: str
) -> AssetSettings:
    """Merge IO manager ``defaults`` with ``refiner/*`` keys of an asset's metadata.

    Unknown ``refiner/`` keys raise ``ValueError`` naming the asset and the known keys,
    so a typo never silently falls back to a default.
    """
    values = dict(defaults)
    for key, raw in (metadata or {}).items():
        if not key.startswith(METADATA_PREFIX) or key in (LOAD_KEY, DATASET_KEY):
            continue
        name = key[len(METADATA_PREFIX) :]
        if name not in SETTING_KEYS:
            known = ", ".join(METADATA_PREFIX + k for k in SETTING_KEYS)
            raise ValueError(f"{where}: unknown metadata key {key!r}; known keys: {known}")
        values[name] = unwrap_metadata(raw)
    fmt = values["format"]
    if fmt not in FORMATS:
        raise ValueError(
            f"{where}: format {fmt!r} is not one of {', '.join(FORMATS)} "
            f"(set {METADATA_PREFIX}format or the IO manager's format)"
        )
    policy = values["missing_policy"]
    if policy not in MISSING_POLICIES:
        raise ValueError(
            f"{where}: missing_policy {policy!r} is not one of {', '.join(MISSING_POLICIES)} "
            f"(set {METADATA_PREFIX}missing_policy or the IO manager's missing_policy)"
        )
    num_workers = values.get("num_workers") or os.cpu_count() or 1
    return AssetSettings(
        format=fmt,
        subdir=str(values["subdir"]),
        missing_policy=policy,
        target_bytes=_positive_int(values["target_bytes"], "target_bytes", where),
        num_workers=_positive_int(num_workers, "num_workers", where),
        max_in_flight=_positive_int(values["max_in_flight"], "max_in_flight", where),
        finalize_inline=bool(values.get("finalize_inline", False)),
        dedupe=values.get("dedupe"),
        checksum=values.get("checksum"),
    )

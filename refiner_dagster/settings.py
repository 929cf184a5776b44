"""Per-asset writer settings: IO manager config, overridden by ``definition_metadata``.

Keys an asset may set in ``metadata=`` (all optional):

=========================  ===================================================
``refiner/format``         ``"parquet"`` (default), ``"jsonl"`` or ``"lance"``
``refiner/target_bytes``   block size target for packed assets (blob IO manager)
``refiner/missing_policy`` ``"error"``, ``"set_null"`` or ``"drop_row"``
``refiner/subdir``         asset folder inside the version folder (``"assets"``)
``refiner/num_workers``    worker processes on the step's machine
``refiner/max_in_flight``  concurrent asset copies per worker
``refiner/finalize_inline`` ``True`` to finalize and publish in the same step (a bool)
``refiner/dedupe``         ``"source"`` or ``"content"``: repeated media stored once (blob IO manager)
``refiner/checksum``       ``"sha256"`` or ``"crc32c"``: checksums in references or a sibling column
``refiner/keep_versions``  published versions kept after a publish (default 3)
``refiner/keep_for``       seconds: also keep versions readers saw this recently
``refiner/mode``           ``"overwrite"`` (default) or ``"append"``: add the new rows to the published version
=========================  ===================================================

``refiner/format: lerobot`` writes a LeRobot v3.0 dataset; its options are the
``refiner/lerobot_*`` keys of :mod:`refiner_dagster.lerobot_format`.

Every key and value is checked by :func:`validate_asset_metadata`, which
:func:`~refiner_dagster.build_finalization_asset`, :func:`~refiner_dagster.build_dataset_checks`
and the component call when the definitions load, so a typo fails
``dagster definitions validate`` rather than a run.

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import refiner_core as mdr
from refiner_core.integration import usable_cpus
from refiner_core.vocabulary import MISSING_POLICIES, MissingPolicy

from .lerobot_format import (
    DATASET_FORMATS,
    LEROBOT_KEYS,
    DatasetFormat,
    LeRobotOptions,
    check_lerobot_value,
    lerobot_options,
)
from .retention import DEFAULT_KEEP_VERSIONS

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
    "keep_versions",
    "keep_for",
    "mode",
)
WRITE_MODES = ("overwrite", "append")
# Formats whose versions share files with the version they append to.
APPEND_FORMATS = ("parquet", "jsonl", "lance")
# Input metadata key telling the IO manager what to load: see ``io_manager``.
LOAD_KEY = "refiner/load"
LOAD_MODES = ("table", "version", "pending")
# Definition metadata of a finalization asset: the dataset asset it finalizes.
DATASET_KEY = "refiner/dataset"
# Output metadata the IO manager records (not settings).
ASSET_COLUMNS_KEY = "refiner/asset_columns"
IO_MANAGER_SUFFIX = " (IO manager)"


@dataclass(frozen=True)
class AssetSettings:
    """The writer settings of one asset materialization."""

    format: DatasetFormat
    subdir: str
    missing_policy: MissingPolicy
    target_bytes: int
    num_workers: int
    max_in_flight: int
    finalize_inline: bool
    dedupe: str | None = None
    checksum: str | None = None
    lerobot: LeRobotOptions | None = None
    keep_versions: int = DEFAULT_KEEP_VERSIONS
    keep_for: float | None = None
    mode: str = "overwrite"


def unwrap_metadata(value: Any) -> Any:
    """Metadata values may arrive wrapped (``MetadataValue``); take the raw value.

    >>> import dagster as dg
    >>> unwrap_metadata(dg.MetadataValue.text("jsonl")), unwrap_metadata(3)
    ('jsonl', 3)
    """
    return getattr(value, "value", value)


def _where_key(where: str, key: str) -> str:
    if where.endswith(IO_MANAGER_SUFFIX):
        return f"{where[: -len(IO_MANAGER_SUFFIX)]}: IO manager field {key}"
    return f"{where}: metadata {METADATA_PREFIX}{key}"


def _positive_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{_where_key(where, key)}={value!r} must be a positive integer "
            f"(for example {METADATA_PREFIX}{key}: 4)"
        )
    return value


def _one_of(value: Any, choices: tuple[str, ...], key: str, where: str, field: str) -> str:
    if value not in choices:
        raise ValueError(
            f"{_where_key(where, key)}={value!r} is not one of {', '.join(map(repr, choices))} "
            f"(set {METADATA_PREFIX}{key} on the asset or the IO manager's {field})"
        )
    return value


# Settings whose values the asset config classes check themselves.
_CONFIG_CHECKED: dict[str, type] = {
    "dedupe": mdr.BlobAssetConfig,
    "checksum": mdr.BlobAssetConfig,
    "subdir": mdr.FileAssetConfig,
}


def _accepted_by(config: type, value: Any, key: str, where: str) -> Any:
    """``value`` when ``config(key=value)`` accepts it; its error, naming the key, when not."""
    try:
        config(**{key: value})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{_where_key(where, key)}={value!r} is invalid: {exc}") from exc
    return value


def _check_value(name: str, value: Any, where: str) -> Any:
    if name == "format":
        return _one_of(value, DATASET_FORMATS, name, where, "format")
    if name == "missing_policy":
        return _one_of(value, MISSING_POLICIES, name, where, "missing_policy")
    if name in ("target_bytes", "max_in_flight", "num_workers", "keep_versions"):
        return _positive_int(value, name, where)
    if name == "finalize_inline":
        if not isinstance(value, bool):
            raise ValueError(
                f"{_where_key(where, name)}={value!r} must be a boolean, True or False "
                "(a string such as 'false' is not accepted)"
            )
        return value
    if name == "keep_for":
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            raise ValueError(
                f"{_where_key(where, name)}={value!r} must be a number of seconds of at least 0 "
                f"(for example {METADATA_PREFIX}{name}: 604800 keeps a week), or None"
            )
        return value
    if name == "mode":
        return _one_of(value, WRITE_MODES, name, where, "mode")
    if name in _CONFIG_CHECKED:
        return _accepted_by(_CONFIG_CHECKED[name], value, name, where)
    raise AssertionError(name)


def validate_asset_metadata(metadata: Mapping[str, Any] | None, *, where: str) -> dict[str, Any]:
    """Check every ``refiner/*`` key of a dataset asset's metadata; return the settings set.

    Unknown ``refiner/`` keys raise ``ValueError`` naming the asset and the known keys,
    and each value must have the right type and range, so a typo never silently falls
    back to a default or fails only after the asset body ran.

    >>> validate_asset_metadata({"refiner/format": "jsonl", "owner": "me"}, where="asset a")
    {'format': 'jsonl'}
    >>> validate_asset_metadata({"refiner/finalize_inline": "false"}, where="asset a")
    Traceback (most recent call last):
    ...
    ValueError: asset a: metadata refiner/finalize_inline='false' must be a boolean, True or False (a string such as 'false' is not accepted)
    """
    found: dict[str, Any] = {}
    for key, raw in (metadata or {}).items():
        if not key.startswith(METADATA_PREFIX) or key in (
            LOAD_KEY,
            DATASET_KEY,
            ASSET_COLUMNS_KEY,
        ):
            continue
        name = key[len(METADATA_PREFIX) :]
        if name in LEROBOT_KEYS:
            found[name] = check_lerobot_value(name, unwrap_metadata(raw), where)
            continue
        if name not in SETTING_KEYS:
            known = ", ".join(METADATA_PREFIX + k for k in (*SETTING_KEYS, *LEROBOT_KEYS))
            raise ValueError(f"{where}: unknown metadata key {key!r}; known keys: {known}")
        found[name] = _check_value(name, unwrap_metadata(raw), where)
    lerobot_options(found, where=where)  # LeRobot keys only with format lerobot, fps given
    if "format" in found:
        check_append_format(found.get("mode", "overwrite"), found["format"], where)
    return found


def check_append_format(mode: str, fmt: str, where: str) -> None:
    """Refuse ``refiner/mode: append`` on a format whose versions cannot share files."""
    if mode == "append" and fmt not in APPEND_FORMATS:
        raise ValueError(
            f"{where}: metadata {METADATA_PREFIX}mode='append' works for "
            f"{', '.join(APPEND_FORMATS)} datasets, not format {fmt!r}: a {fmt} version is "
            "written whole. Drop refiner/mode (each materialization then writes the dataset "
            "again), or write the dataset as parquet to append to it"
        )


def resolve_settings(
    defaults: dict[str, Any], metadata: dict[str, Any] | None, *, where: str
) -> AssetSettings:
    """Merge IO manager ``defaults`` with ``refiner/*`` keys of an asset's metadata.

    Every value is validated (see :func:`validate_asset_metadata`); a ``num_workers``
    left unset becomes the CPUs this process may use that other work leaves idle
    (:func:`~refiner_core.integration.usable_cpus`).
    """
    found = validate_asset_metadata(metadata, where=where)
    values = {**defaults, **found}
    checked = {
        name: _check_value(name, values[name], where + IO_MANAGER_SUFFIX)
        for name in SETTING_KEYS
        if name in values and not (name == "num_workers" and values[name] is None)
    }
    num_workers = checked.get("num_workers") or usable_cpus()
    mode = checked.get("mode", "overwrite")
    check_append_format(mode, checked["format"], where)
    return AssetSettings(
        format=checked["format"],
        subdir=str(checked["subdir"]),
        missing_policy=checked["missing_policy"],
        target_bytes=checked["target_bytes"],
        num_workers=num_workers,
        max_in_flight=checked["max_in_flight"],
        finalize_inline=checked.get("finalize_inline", False),
        dedupe=checked.get("dedupe"),
        checksum=checked.get("checksum"),
        keep_versions=checked.get("keep_versions", DEFAULT_KEEP_VERSIONS),
        keep_for=checked.get("keep_for"),
        mode=mode,
        lerobot=lerobot_options({**found, "format": checked["format"]}, where=where),
    )

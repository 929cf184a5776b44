"""What a refiner IO manager hands an input: picked by its type annotation and metadata.

=================================  ====================================================
input annotation                   receives
=================================  ====================================================
``mdr.Pipeline`` (or none)         a lazy pipeline over the published table
``DatasetVersion``                 the published :class:`~refiner_dagster.DatasetVersion`
``dict[str, mdr.Pipeline]`` etc.   one of those per upstream partition, keyed by partition
=================================  ====================================================

Input metadata refines it (``dg.AssetIn(metadata=...)``):

- ``refiner/load``: ``"table"``, ``"version"`` or ``"pending"`` (the written,
  unpublished version finalization assets load); overrides the annotation.
- ``columns``: read only these columns (Dagster's usual key); an unknown name is an error
  listing the table's columns.
- ``allow_missing_partitions``: ``True`` leaves upstream partitions that have no
  published version out of the dict instead of failing.
- ``refiner/version``: read another version than the published one: a version name
  (``"v-0123456789ab"``), or a moment (``dg.MetadataValue.timestamp(datetime)``, or an
  ISO-8601 string with a timezone) for the version that was published then (as
  ``mdr.read_parquet(..., as_of=)``).

Example:
    >>> import dagster as dg, refiner_core as mdr
    >>> from refiner_dagster.loading import annotated_mode
    >>> annotated_mode(dict[str, mdr.Pipeline]), annotated_mode(None)
    ('table', None)
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg

import refiner_core as mdr
from refiner_core.io import check_as_of, first_published, version_at

from .settings import DATASET_KEY, LOAD_KEY, LOAD_MODES, unwrap_metadata
from .storage import DatasetStorage, DatasetVersion
from .tables import open_version, version_schema

__all__ = [
    "annotated_mode",
    "dataset_path",
    "input_columns",
    "input_mode",
    "input_version",
    "locate",
    "select_columns",
]

COLUMNS_KEY = "columns"
VERSION_KEY = "refiner/version"
# A version an input asks for: a version name, or the moment it was published.
Wanted = str | datetime | None
ALLOW_MISSING_KEY = "allow_missing_partitions"


def annotated_mode(annotation: Any) -> str | None:
    """``"version"`` for ``DatasetVersion``, ``"table"`` for ``mdr.Pipeline`` (also as the
    values of a ``dict``), ``None`` for anything else."""
    origin = typing.get_origin(annotation)
    if origin in (dict, Mapping, typing.Mapping):
        args = typing.get_args(annotation)
        annotation = args[-1] if args else None
    if annotation is DatasetVersion:
        return "version"
    if isinstance(annotation, type) and issubclass(annotation, mdr.Pipeline):
        return "table"
    return None


def input_mode(context: dg.InputContext) -> str:
    """The input's ``refiner/load`` metadata, else what its annotation asks, else ``table``."""
    raw = context.definition_metadata.get(LOAD_KEY)
    if raw is not None:
        mode = unwrap_metadata(raw)
        if mode not in LOAD_MODES:
            raise ValueError(
                f"input {context.name!r}: metadata {LOAD_KEY}={mode!r} is not one of "
                f"{', '.join(map(repr, LOAD_MODES))}"
            )
        return mode
    dagster_type = context.dagster_type
    annotation = getattr(dagster_type, "typing_type", None)
    return annotated_mode(annotation) or "table"


def input_columns(context: dg.InputContext) -> list[str] | None:
    """The ``columns`` input metadata, checked to be a list of names."""
    raw = unwrap_metadata(context.definition_metadata.get(COLUMNS_KEY))
    if raw is None:
        return None
    if isinstance(raw, str) or not all(isinstance(c, str) for c in raw or []):
        raise ValueError(
            f"input {context.name!r}: metadata {COLUMNS_KEY}={raw!r} must be a list of column "
            "names, e.g. {'columns': ['episode_id', 'image']}"
        )
    return list(raw)


def input_version(context: dg.InputContext) -> Wanted:
    """The ``refiner/version`` input metadata: a version name or an aware datetime."""
    given = context.definition_metadata.get(VERSION_KEY)
    if isinstance(given, dg.TimestampMetadataValue):
        return datetime.fromtimestamp(given.value, UTC)
    raw = unwrap_metadata(given)
    where = f"input {context.name!r}: metadata {VERSION_KEY}"
    if raw is None or isinstance(raw, datetime):
        return check_as_of(raw, where)
    if isinstance(raw, str) and raw.startswith("v-"):
        return raw
    if isinstance(raw, str):
        try:
            return check_as_of(datetime.fromisoformat(raw), where)
        except ValueError as exc:
            if "timezone" in str(exc):
                raise
    raise ValueError(
        f"{where}={raw!r} is neither a version name ('v-0123456789ab') nor a timezone-aware "
        "moment (dg.MetadataValue.timestamp(datetime), or an ISO-8601 string such as "
        "'2024-05-01T12:00:00+00:00')"
    )


def allow_missing(context: dg.InputContext) -> bool:
    return bool(unwrap_metadata(context.definition_metadata.get(ALLOW_MISSING_KEY, False)))


class _Select:
    """A row step keeping ``columns`` (formats without column pruning: JSONL)."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns

    def __call__(self, row: mdr.Row) -> mdr.Row:
        unknown = [name for name in self.columns if name not in row]
        if unknown:
            raise ValueError(
                f"input metadata columns names {unknown} that the table does not have; its "
                f"columns are {list(row.keys())}"
            )
        return mdr.Row({name: row[name] for name in self.columns})


def select_columns(version: DatasetVersion, columns: list[str], where: str) -> mdr.Pipeline:
    """A lazy pipeline over ``columns`` of ``version``; unknown names are an error."""
    if version.format == "jsonl":  # no schema on storage: checked on each row
        return open_version(version).map(_Select(columns))
    schema = version_schema(version)
    if schema is not None:
        unknown = [c for c in columns if c not in schema.names]
        if unknown:
            raise ValueError(
                f"{where}: input metadata columns names {unknown} that {version.describe()} does "
                f"not have; its columns are {schema.names}"
            )
    return open_version(version, columns=columns)


def dataset_path(context: dg.InputContext) -> list[str]:
    """The dataset asset behind an input (a finalization asset points at its dataset)."""
    upstream = context.upstream_output
    metadata = upstream.definition_metadata if upstream is not None else {}
    dataset = unwrap_metadata((metadata or {}).get(DATASET_KEY))
    if dataset:
        return list(dg.AssetKey.from_user_string(str(dataset)).path)
    return list(context.asset_key.path)


def locate(
    storage: DatasetStorage,
    asset_path: list[str],
    key: str | None,
    mode: str,
    run_version: str | None,
    wanted: Wanted = None,
) -> DatasetVersion:
    """The version an input loads: the published one, the one ``wanted`` names (or that
    was published at the moment it gives), or for ``pending`` the written one."""
    where = f"asset {'/'.join(asset_path)}" + (f" partition {key!r}" if key is not None else "")
    if mode == "pending":
        version = storage.pending(asset_path, key, prefer=run_version)
        version = version or storage.current(asset_path, key)
        if version is not None:
            return version
        raise FileNotFoundError(
            f"{where} has no written version under {storage.url}; materialize the asset first"
        )
    current = storage.current(asset_path, key)
    if current is None:
        raise FileNotFoundError(
            f"{where} has no published version under {storage.url}: materialize it and then its "
            "finalization asset (build_finalization_asset), or set finalize_inline=True"
        )
    if isinstance(wanted, datetime):
        name = version_at(current.record, wanted)
        if name is None:
            earliest = first_published(current.record)
            raise FileNotFoundError(
                f"{where} had no published version at {wanted.isoformat()}; its earliest "
                f"recorded publish was at {earliest.isoformat() if earliest else 'unknown'}. "
                f"Set input metadata {VERSION_KEY} to a later moment"
            )
        wanted = name
    if wanted is None or wanted == current.name:
        return current
    for version in storage.versions(asset_path, key):
        if version.name == wanted and version.folder.exists(version.name):
            return version
    kept = ", ".join(v.name for v in storage.versions(asset_path, key)) or "none"
    raise FileNotFoundError(
        f"{where} has no version {wanted} under {storage.url} (never written, or deleted by "
        f"its retention policy); versions on storage: {kept}. Set input metadata "
        f"{VERSION_KEY} to one of them"
    )

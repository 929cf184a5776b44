"""The words writer options take, defined once: formats, missing policies, asset forms, Lance modes.

Each is a ``Literal`` type (for signatures and for config systems that read them,
such as Dagster's) with the tuple of its values (for checks and error messages).
Summaries, manifests and refiner_dagster's records and metadata use the same words.

Example:
    >>> from refiner_core.vocabulary import FORMATS, MISSING_POLICIES, ASSET_FORMS, check_choice
    >>> FORMATS, MISSING_POLICIES, ASSET_FORMS
    (('parquet', 'jsonl', 'lance'), ('error', 'set_null', 'drop_row'), ('files', 'blobs'))
    >>> check_choice("missing_policy", "skip", MISSING_POLICIES)
    Traceback (most recent call last):
    ...
    ValueError: missing_policy 'skip' is not one of 'error', 'set_null', 'drop_row'
"""

from __future__ import annotations

from typing import Any, Literal, get_args

Format = Literal["parquet", "jsonl", "lance"]
"""Table format a writer writes and a reader reads."""

MissingPolicy = Literal["error", "set_null", "drop_row"]
"""What a missing source asset does: fail the shard, null the cell, or drop the row."""

AssetForm = Literal["files", "blobs"]
"""How a writer stores media: a file per asset (``FileAssetConfig``) or packed blocks
(``BlobAssetConfig``). ``None`` where a form is expected: asset values are written as they are."""

LanceMode = Literal["create", "append", "overwrite"]
"""``write_lance(mode=...)``: refuse an existing dataset, add fragments to it, or replace it."""

FORMATS: tuple[Format, ...] = get_args(Format)
MISSING_POLICIES: tuple[MissingPolicy, ...] = get_args(MissingPolicy)
ASSET_FORMS: tuple[AssetForm, ...] = get_args(AssetForm)
LANCE_MODES: tuple[LanceMode, ...] = get_args(LanceMode)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming ``name``, the bad ``value`` and the allowed ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} {value!r} is not one of {', '.join(map(repr, choices))}")


__all__ = [
    "ASSET_FORMS",
    "FORMATS",
    "LANCE_MODES",
    "MISSING_POLICIES",
    "AssetForm",
    "Format",
    "LanceMode",
    "MissingPolicy",
    "check_choice",
]

"""Finding asset columns in a table and naming their files safely."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

import pyarrow as pa

from ...datatype import AssetInfo, asset_of

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class AssetColumn:
    name: str
    index: int
    field: pa.Field
    info: AssetInfo
    dirname: str


def asset_columns(schema: pa.Schema) -> list[AssetColumn]:
    """The asset columns of ``schema``, in column order.

    Each gets a folder name of its own: columns whose safe names collide (``cam a``
    and ``cam/a``) are told apart by their column index.
    """
    found = []
    used: set[str] = set()
    for i, field in enumerate(schema):
        info = asset_of(field)
        if info is not None:
            base = safe_name(field.name, fallback="column")
            dirname, k = base, i
            while dirname in used:
                dirname, k = f"{base}-{k}", k + 1
            used.add(dirname)
            found.append(AssetColumn(field.name, i, field, info, dirname))
    return found


def safe_name(name: str, *, fallback: str, limit: int = 80) -> str:
    """A readable file-name fragment: unsafe characters become ``_``; never ``.``/``..``."""
    cleaned = _UNSAFE.sub("_", name).strip("._")[:limit]
    return cleaned or fallback


def asset_file_name(row: int, element: int | None, value: object, form: str) -> str:
    """``<row>[-<element>]_<source name>`` for file-per-asset outputs."""
    prefix = f"{row:08d}" if element is None else f"{row:08d}-{element:04d}"
    if form == "path" and isinstance(value, str):
        base = value.rstrip("/").split("?", 1)[0].rpartition("/")[2]
        return f"{prefix}_{safe_name(base, fallback='asset')}"
    if form == "blob" and isinstance(value, dict):
        base = posixpath.basename(str(value.get("path", "")))
        return f"{prefix}_{safe_name(base, fallback='blob')}-{value.get('offset')}.bin"
    return f"{prefix}.bin"

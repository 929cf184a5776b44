"""Asset writers: copy (FileAssetConfig) or pack (BlobAssetConfig) the media rows point to.

Both run inside the sink's attempt writer, before a table is written, so the same
code serves Parquet, JSONL and Lance outputs.
"""

from __future__ import annotations

from typing import Any

from .base import AssetWriteError, MissingAssetError
from .blob_writer import BlobAssetWriter
from .config import AssetConfig, BlobAssetConfig, FileAssetConfig, resolve_assets_argument
from .file_writer import FileAssetWriter


def make_asset_writer(config: AssetConfig | None, folder: Any, attempt: str) -> Any:
    """The asset writer of one shard attempt, or ``None`` when values are kept as they are."""
    if config is None:
        return None
    if isinstance(config, BlobAssetConfig):
        return BlobAssetWriter(config, folder, attempt)
    return FileAssetWriter(config, folder, attempt)


__all__ = [
    "AssetConfig",
    "AssetWriteError",
    "BlobAssetConfig",
    "FileAssetConfig",
    "MissingAssetError",
    "make_asset_writer",
    "resolve_assets_argument",
]

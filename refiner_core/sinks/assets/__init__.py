"""Asset writers: copy (FileAssetConfig) or pack (BlobAssetConfig) the media rows point to."""

from __future__ import annotations

from typing import Any

from .config import AssetConfig, BlobAssetConfig, FileAssetConfig, resolve_assets_argument


def make_asset_writer(config: AssetConfig | None, folder: Any, attempt: str) -> Any:
    """The asset writer of one shard attempt, or ``None`` when values are kept as they are."""
    if config is None:
        return None
    raise NotImplementedError("asset writers are not available yet")


__all__ = [
    "AssetConfig",
    "BlobAssetConfig",
    "FileAssetConfig",
    "make_asset_writer",
    "resolve_assets_argument",
]

"""Where asset writers may read media from: the policy of :mod:`refiner_core.io.source_policy`,
which blob reads share, under the name the asset writers have always imported it by."""

from __future__ import annotations

from ...io.source_policy import (
    PSEUDO_FILESYSTEMS,
    RefusedSource,
    SourcePolicy,
    check_allowed_sources,
    is_url,
)

__all__ = ["PSEUDO_FILESYSTEMS", "RefusedSource", "SourcePolicy", "check_allowed_sources", "is_url"]

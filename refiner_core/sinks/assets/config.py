"""How writers store media: ``FileAssetConfig`` (a file each) or ``BlobAssetConfig`` (packed)."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, ClassVar

from ...io.checksum import check_algorithm
from ...io.datafile import check_relative
from ...validation import check_positive
from ...vocabulary import MISSING_POLICIES, AssetForm, MissingPolicy, check_choice
from .sources import check_allowed_sources

DEDUPE_MODES = ("source", "content")
LEGACY_KEYWORDS = (
    "upload_assets",
    "assets_subdir",
    "max_asset_uploads_in_flight",
    "missing_asset_policy",
)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside refiner_core, seen from the warning's caller.

    Python shows a DeprecationWarning by default only when it is attributed to
    ``__main__``, so the warning must point at the user's line, however deep the call.
    """
    frame: FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def _validate_common(config: Any) -> None:
    if not isinstance(config.subdir, str) or not config.subdir:
        raise ValueError(f"subdir must be a non-empty relative folder name, got {config.subdir!r}")
    check_relative(config.subdir, what="subdir")
    if config.subdir.startswith(("_", ".")):
        raise ValueError(
            f"subdir {config.subdir!r} must not start with '_' or '.': those names are reserved "
            "for refiner's own files and skipped by readers"
        )
    check_choice("missing_policy", config.missing_policy, MISSING_POLICIES)
    object.__setattr__(config, "allowed_sources", check_allowed_sources(config.allowed_sources))
    options = config.source_storage_options
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(
            "source_storage_options must be a dict of fsspec options for the filesystem the "
            f"assets are read from (e.g. {{'endpoint_url': ...}}), got {type(options).__name__}"
        )
    if config.checksum is not None:
        check_algorithm(config.checksum)


@dataclass(frozen=True)
class FileAssetConfig:
    """Copy every asset to its own file under ``<output>/<subdir>/<shard>__<attempt>/<column>/``.

    The cell becomes the new file's absolute path or URL. Up to ``max_in_flight``
    copies run at once; a row is written only after all of its copies finished.
    ``source_storage_options`` are fsspec options for reading the assets (e.g. media
    on S3 behind another endpoint or credentials); by default an asset on the
    output's filesystem type is read with the output's ``storage_options`` and any
    other with none. ``allowed_sources`` (URL prefixes or local folders) limits
    where assets may be read from; local paths under ``/proc``, ``/sys`` and ``/dev``
    are refused in any case (see :mod:`refiner_core.io.source_policy`).

    ``form`` is ``"files"``, the word summaries and records use for this config.

    ``checksum="sha256"|"crc32c"`` records each copy's checksum (``"<algorithm>:<hex>"``)
    in a sibling string column ``<column>_checksum``, computed on the bytes as they are
    written (such copies stream through the worker instead of being copied server-side).

    Example:
        >>> import refiner_core as mdr
        >>> mdr.FileAssetConfig(subdir="media", max_in_flight=32, missing_policy="error").subdir
        'media'
        >>> mdr.FileAssetConfig.form
        'files'
    """

    form: ClassVar[AssetForm] = "files"

    subdir: str = "assets"
    max_in_flight: int = 16
    missing_policy: MissingPolicy = "error"
    source_storage_options: dict[str, Any] | None = field(default=None, hash=False)
    allowed_sources: tuple[str, ...] | None = None
    checksum: str | None = None

    def __post_init__(self) -> None:
        _validate_common(self)
        check_positive("max_in_flight", self.max_in_flight)


@dataclass(frozen=True)
class BlobAssetConfig:
    """Pack assets into block files under ``<output>/<subdir>/<shard>__<attempt>/<column>/``.

    Each cell becomes ``{path, offset, size}``. A block rolls over when it is
    non-empty and the next asset would take it past ``target_bytes``; an asset larger
    than the target gets a block of its own. ``source_storage_options`` as for
    :class:`FileAssetConfig`, and so are ``allowed_sources``.

    ``form`` is ``"blobs"``.

    ``dedupe`` stores repeated media once per writer attempt (never across attempts, so
    removing a rejected attempt cannot break a kept row); the references of the
    repeats point at the same ``{path, offset, size}``:

    - ``None`` (default): every asset is stored.
    - ``"source"``: assets read from the same source (same URL and range, same size and
      modification time or ETag) share one copy; a repeat is not read again.
    - ``"content"``: assets with identical bytes share one copy. They are matched by
      size and CRC32C, confirmed byte by byte against the stored copy, on local outputs,
      and by size and SHA-256 on object stores (where a copy cannot be read back cheaply).

    With ``dedupe="content"`` every attempt also records a digest index of what it
    stored (``_refiner/digests/<shard>__<attempt>.parquet``: size, digest, block path,
    offset). ``dedupe_against`` names earlier output folders (URLs or local paths, on
    the output's storage) whose packed assets count as already stored: an asset with
    the same bytes as one of theirs is not written again; its cell gets the earlier
    ``{path, offset, size}``, a reference into the earlier folder (keep that folder
    while this output is used). Only the kept attempts of an earlier folder count; a
    folder with no digest index (written without ``dedupe="content"``) is refused with
    an error naming it. The writer keys on the digest the earlier indexes use
    (CRC32C, confirmed byte by byte, when they were written to a local disk; SHA-256
    when written to an object store).

    ``checksum="sha256"|"crc32c"`` gives each reference a ``checksum`` field
    (``"<algorithm>:<hex>"``), computed while the bytes stream into the block, and
    carried over unchanged from source references that already have one of the same
    algorithm; ``mdr.read_blob(ref, verify=True)`` checks it.

    Example:
        >>> import refiner_core as mdr
        >>> mdr.BlobAssetConfig(target_bytes=1 << 30).target_bytes
        1073741824
        >>> mdr.BlobAssetConfig.form
        'blobs'
        >>> mdr.BlobAssetConfig(dedupe="content", checksum="crc32c").dedupe
        'content'
        >>> mdr.BlobAssetConfig(dedupe="content", dedupe_against=["s3://b/v1"]).dedupe_against
        ('s3://b/v1',)
    """

    form: ClassVar[AssetForm] = "blobs"

    subdir: str = "assets"
    target_bytes: int = 1 << 30
    missing_policy: MissingPolicy = "error"
    max_in_flight: int = 16
    source_storage_options: dict[str, Any] | None = field(default=None, hash=False)
    allowed_sources: tuple[str, ...] | None = None
    dedupe: str | None = None
    checksum: str | None = None
    dedupe_against: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _validate_common(self)
        if self.dedupe is not None and self.dedupe not in DEDUPE_MODES:
            raise ValueError(
                f"dedupe {self.dedupe!r} is not one of {', '.join(map(repr, DEDUPE_MODES))} "
                "(or None to store every asset)"
            )
        _validate_dedupe_against(self)
        check_positive("target_bytes", self.target_bytes)
        check_positive("max_in_flight", self.max_in_flight)


def _validate_dedupe_against(config: BlobAssetConfig) -> None:
    against = config.dedupe_against
    if isinstance(against, str) or not isinstance(against, (tuple, list)):
        raise ValueError(
            "dedupe_against must be a tuple of earlier output folders (URLs or paths), got "
            f"{against!r}; wrap a single folder as (folder,)"
        )
    bad = [url for url in against if not isinstance(url, str) or not url]
    if bad:
        raise ValueError(f"dedupe_against: {bad[0]!r} is not an output folder URL or path")
    if against and config.dedupe != "content":
        raise ValueError(
            f"dedupe_against={tuple(against)!r} matches assets by their bytes; it needs "
            f"dedupe='content' (got dedupe={config.dedupe!r})"
        )
    object.__setattr__(config, "dedupe_against", tuple(against))


AssetConfig = FileAssetConfig | BlobAssetConfig


def resolve_assets_argument(
    assets: Any, legacy: dict[str, Any], *, writer: str
) -> AssetConfig | None:
    """Validate ``assets=`` and map the old keywords onto ``FileAssetConfig`` with a warning."""
    unknown = sorted(set(legacy) - set(LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"{writer}() got unexpected keyword argument(s) {unknown}")
    if assets is not None and not isinstance(assets, (FileAssetConfig, BlobAssetConfig)):
        raise TypeError(
            f"{writer}(assets=...) takes mdr.FileAssetConfig(...), mdr.BlobAssetConfig(...) or None, "
            f"got {type(assets).__name__}"
        )
    if not legacy:
        return assets
    if assets is not None:
        raise ValueError(
            f"{writer}() got assets= together with the old keywords {sorted(legacy)}; "
            "use only assets=mdr.FileAssetConfig(...)"
        )
    if not legacy.get("upload_assets", True):
        ignored = sorted(set(legacy) - {"upload_assets"})
        warnings.warn(
            f"{writer}(upload_assets=False) is deprecated; use assets=None"
            + (f" ({', '.join(ignored)} had no effect without uploads)" if ignored else ""),
            DeprecationWarning,
            stacklevel=_caller_stacklevel(),
        )
        return None
    options = {}
    if "assets_subdir" in legacy:
        options["subdir"] = legacy["assets_subdir"]
    if "max_asset_uploads_in_flight" in legacy:
        options["max_in_flight"] = legacy["max_asset_uploads_in_flight"]
    if "missing_asset_policy" in legacy:
        options["missing_policy"] = legacy["missing_asset_policy"]
    config = FileAssetConfig(**options)
    call = ", ".join(f"{k}={v!r}" for k, v in options.items())
    warnings.warn(
        f"{writer}({', '.join(sorted(legacy))}) is deprecated; use "
        f"assets=mdr.FileAssetConfig({call}) instead",
        DeprecationWarning,
        stacklevel=_caller_stacklevel(),
    )
    return config

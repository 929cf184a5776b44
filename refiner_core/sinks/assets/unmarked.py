"""A warning for asset configs that find no asset column: nothing would be packed or copied.

``assets=mdr.BlobAssetConfig()`` acts only on columns marked with an asset dtype. When
a table reaches the writer with none, the writer warns once per process, naming the
string columns whose values look like media paths (by extension) and the ``dtypes=``
that marks them.

Example:
    >>> import pyarrow as pa, warnings
    >>> from refiner_core.sinks.assets.unmarked import media_path_columns
    >>> table = pa.table({"clip": ["a/1.mp4", "a/2.mp4"], "note": ["x", "y"]})
    >>> media_path_columns(table)
    {'clip': 'mdr.datatype.video_path()'}
"""

from __future__ import annotations

import posixpath
import warnings

import pyarrow as pa

EXTENSIONS = {
    "image": (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".exr"),
    "video": (".mp4", ".mov", ".avi", ".mkv", ".webm", ".m4v", ".mcap", ".bag"),
    "audio": (".wav", ".mp3", ".flac", ".ogg", ".m4a", ".opus"),
    "file": (".bin", ".npy", ".npz", ".pdf", ".hdf5", ".h5", ".pcd", ".ply"),
}
SAMPLE = 32
_warned: set[str] = set()


class UnmarkedAssetsWarning(UserWarning):
    """An asset config found no asset column to pack or copy."""


def _kind(value: str) -> str | None:
    extension = posixpath.splitext(value.split("?", 1)[0])[1].lower()
    for kind, extensions in EXTENSIONS.items():
        if extension in extensions:
            return kind
    return None


def media_path_columns(table: pa.Table) -> dict[str, str]:
    """String (or list of string) columns whose sampled values mostly end in a media
    extension, each with the dtype that marks it."""
    found = {}
    for field in table.schema:
        is_list = pa.types.is_list(field.type) or pa.types.is_large_list(field.type)
        value_type = field.type.value_type if is_list else field.type
        if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
            continue
        values = table.column(field.name).slice(0, SAMPLE).to_pylist()
        if is_list:
            values = [v for cell in values if cell for v in cell]
        kinds = [_kind(v) for v in values if isinstance(v, str)]
        known = [k for k in kinds if k is not None]
        if known and len(known) * 2 > len(kinds):
            dtype = f"mdr.datatype.{max(set(known), key=known.count)}_path()"
            found[field.name] = f"mdr.datatype.list_({dtype})" if is_list else dtype
    return found


def warn_unmarked(table: pa.Table, config: object) -> None:
    """Warn once per process that ``config`` has no asset column to act on in ``table``."""
    name = type(config).__name__
    if name in _warned or table.num_rows == 0:
        return
    _warned.add(name)
    candidates = media_path_columns(table)
    if candidates:
        pairs = ", ".join(f'"{column}": {dtype}' for column, dtype in candidates.items())
        hint = (
            f"columns {sorted(candidates)} look like media paths; mark them when reading, "
            f"e.g. dtypes={{{pairs}}}"
        )
    else:
        hint = "mark the media columns with asset dtypes, e.g. dtypes={'image': mdr.datatype.image_path()}"
    warnings.warn(
        f"assets=mdr.{name}(...) found no asset column, so nothing is packed or copied: {hint}",
        UnmarkedAssetsWarning,
        stacklevel=2,
    )

"""Column types: Arrow scalar aliases plus asset types that writers act on.

An asset type is an Arrow type together with field metadata that marks the
column as media (``refiner.asset.kind``: file/image/video/audio, and
``refiner.asset.form``: path/bytes/blob/clip). The mark is plain Arrow field metadata,
so it survives a Parquet round trip. A list of asset values is an asset column too.

Tables written by other tools that mark media columns with an ``asset_type`` field
metadata value (``video``, ``image``, ``audio``, ``file``; any other value counts as
``file``) are read as marked too, the form following the column's Arrow type. Refiner
writes only its own marks.

Example:
    >>> import refiner_core as mdr
    >>> dtypes = {"video": mdr.datatype.video_path(), "frames": mdr.datatype.int64()}
    >>> mdr.datatype.asset_of(mdr.datatype.to_field("video", dtypes["video"])).kind
    'video'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyarrow import (  # noqa: F401  (re-exported scalar aliases)
    binary,
    bool_,
    date32,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    large_binary,
    large_string,
    string,
    struct,
    timestamp,
    uint8,
    uint16,
    uint32,
    uint64,
)

KIND_KEY = b"refiner.asset.kind"
FORM_KEY = b"refiner.asset.form"
# The asset mark of tables written by other tools: only the kind, no form.
FOREIGN_KIND_KEY = b"asset_type"
ASSET_KINDS = ("file", "image", "video", "audio")
ASSET_FORMS = ("path", "bytes", "blob", "clip")

BLOB_REFERENCE_TYPE = pa.struct(
    [pa.field("path", pa.string()), pa.field("offset", pa.uint64()), pa.field("size", pa.uint64())]
)
# The reference of ``BlobAssetConfig(checksum=...)``: ``checksum`` is "<algorithm>:<hex>".
CHECKSUMMED_BLOB_REFERENCE_TYPE = pa.struct(
    [*BLOB_REFERENCE_TYPE, pa.field("checksum", pa.string())]
)

# A time range of a video file (seconds from the file's start). ``offset``/``size`` give the
# byte range of the clip's packets where it is known, ``checksum`` is "<algorithm>:<hex>";
# all three may be null.
VIDEO_CLIP_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("from_timestamp", pa.float64()),
        pa.field("to_timestamp", pa.float64()),
        pa.field("offset", pa.uint64()),
        pa.field("size", pa.uint64()),
        pa.field("checksum", pa.string()),
    ]
)


@dataclass(frozen=True)
class DType:
    """An Arrow type with field metadata (how asset columns are declared)."""

    arrow_type: pa.DataType
    metadata: dict[bytes, bytes] = field(default_factory=dict)

    def to_field(self, name: str, nullable: bool = True) -> pa.Field:
        return pa.field(name, self.arrow_type, nullable=nullable, metadata=self.metadata or None)


@dataclass(frozen=True)
class AssetInfo:
    """What an asset column holds: ``kind`` of media, ``form`` of value, list or scalar."""

    kind: str
    form: str
    is_list: bool


def _asset(arrow_type: pa.DataType, kind: str, form: str) -> DType:
    if kind not in ASSET_KINDS:
        raise ValueError(f"unknown asset kind {kind!r}; use one of {ASSET_KINDS}")
    return DType(arrow_type, {KIND_KEY: kind.encode(), FORM_KEY: form.encode()})


def file_path() -> DType:
    """A string column of file paths or URLs whose files writers copy or pack."""
    return _asset(pa.string(), "file", "path")


def image_path() -> DType:
    """A string column of image paths or URLs."""
    return _asset(pa.string(), "image", "path")


def video_path() -> DType:
    """A string column of video paths or URLs."""
    return _asset(pa.string(), "video", "path")


def audio_path() -> DType:
    """A string column of audio paths or URLs."""
    return _asset(pa.string(), "audio", "path")


def file_bytes() -> DType:
    """A binary column of inline file contents."""
    return _asset(pa.binary(), "file", "bytes")


def image_bytes() -> DType:
    """A binary column of inline encoded images."""
    return _asset(pa.binary(), "image", "bytes")


def video_bytes() -> DType:
    """A binary column of inline encoded videos."""
    return _asset(pa.binary(), "video", "bytes")


def audio_bytes() -> DType:
    """A binary column of inline encoded audio."""
    return _asset(pa.binary(), "audio", "bytes")


def blob_reference(kind: str = "file", *, checksum: bool = False) -> DType:
    """A ``{path, offset, size}`` struct column pointing at a byte range of a blob;
    ``checksum=True`` adds the ``checksum`` string field (``"<algorithm>:<hex>"``)."""
    return _asset(
        CHECKSUMMED_BLOB_REFERENCE_TYPE if checksum else BLOB_REFERENCE_TYPE, kind, "blob"
    )


def video_clip() -> DType:
    """A ``{path, from_timestamp, to_timestamp, offset, size, checksum}`` struct column: a
    time range (seconds, ``[from, to)``) of a video file, read with ``mdr.read_clip`` or
    ``mdr.read_frames``. ``offset``, ``size`` and ``checksum`` may be null.

    Example:
        >>> import refiner_core as mdr
        >>> field = mdr.datatype.to_field("cam", mdr.datatype.video_clip())
        >>> mdr.datatype.asset_of(field)
        AssetInfo(kind='video', form='clip', is_list=False)
    """
    return _asset(VIDEO_CLIP_TYPE, "video", "clip")


def list_(value_type: DType | pa.DataType) -> DType | pa.DataType:
    """A list column; a list of an asset type is an asset column too."""
    if isinstance(value_type, DType):
        return DType(pa.list_(value_type.arrow_type), dict(value_type.metadata))
    return pa.list_(value_type)


def to_field(name: str, dtype: Any) -> pa.Field:
    """Turn a declared dtype (``DType``, ``pa.DataType`` or ``pa.Field``) into a field."""
    if isinstance(dtype, DType):
        return dtype.to_field(name)
    if isinstance(dtype, pa.Field):
        return dtype.with_name(name)
    if isinstance(dtype, pa.DataType):
        return pa.field(name, dtype)
    raise TypeError(
        f"dtype for column {name!r} is {dtype!r}; use a pyarrow type or an mdr.datatype "
        "constructor such as mdr.datatype.int64() or mdr.datatype.video_path()"
    )


def fields_from_dtypes(dtypes: dict[str, Any] | None) -> dict[str, pa.Field]:
    """Validate a ``dtypes=`` mapping and return it as fields."""
    if dtypes is None:
        return {}
    if not isinstance(dtypes, dict):
        raise TypeError(
            f"dtypes must be a dict of column name to type, got {type(dtypes).__name__}"
        )
    return {name: to_field(name, dtype) for name, dtype in dtypes.items()}


def asset_of(field_: pa.Field) -> AssetInfo | None:
    """Return the asset mark of a field, or ``None`` for a plain column.

    Example:
        >>> import pyarrow as pa
        >>> asset_of(pa.field("clip", pa.string(), metadata={"asset_type": "video"}))
        AssetInfo(kind='video', form='path', is_list=False)
    """
    metadata = field_.metadata or {}
    is_list = pa.types.is_list(field_.type) or pa.types.is_large_list(field_.type)
    kind = metadata.get(KIND_KEY)
    form = metadata.get(FORM_KEY)
    if kind is None or form is None:
        foreign = metadata.get(FOREIGN_KIND_KEY)
        return None if foreign is None else _foreign_asset(field_, foreign, is_list)
    return AssetInfo(kind=kind.decode(), form=form.decode(), is_list=is_list)


def _foreign_asset(field_: pa.Field, kind: bytes, is_list: bool) -> AssetInfo | None:
    """An ``asset_type`` mark read as ours: the form is what the Arrow type holds (strings
    are paths, binary is bytes, ``{path, offset, ...}`` structs are blob references); a
    column of any other type is left plain."""
    value_type = field_.type.value_type if is_list else field_.type
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        form = "path"
    elif pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        form = "bytes"
    elif pa.types.is_struct(value_type) and {"path", "from_timestamp", "to_timestamp"} <= {
        f.name for f in value_type
    }:
        form = "clip"
    elif pa.types.is_struct(value_type) and {"path", "offset"} <= {f.name for f in value_type}:
        form = "blob"
    else:
        return None
    name = kind.decode(errors="replace").strip().lower()
    return AssetInfo(kind=name if name in ASSET_KINDS else "file", form=form, is_list=is_list)


def with_asset_form(field_: pa.Field, form: str, *, checksum: bool = False) -> pa.Field:
    """Return ``field_`` re-typed for a new asset form (path, bytes or blob), keeping its kind;
    ``checksum=True`` gives blob references their ``checksum`` field."""
    info = asset_of(field_)
    if info is None:
        raise ValueError(f"column {field_.name!r} is not an asset column")
    if form not in ASSET_FORMS:
        raise ValueError(f"asset form must be one of {ASSET_FORMS}, got {form!r}")
    if (info.form == "clip") != (form == "clip"):
        raise ValueError(clip_conversion_error(field_.name, info.form, form))
    blob = CHECKSUMMED_BLOB_REFERENCE_TYPE if checksum else BLOB_REFERENCE_TYPE
    scalar = {"path": pa.string(), "bytes": pa.binary(), "blob": blob, "clip": VIDEO_CLIP_TYPE}[
        form
    ]
    arrow_type = pa.list_(scalar) if info.is_list else scalar
    metadata = {k: v for k, v in (field_.metadata or {}).items() if k != FOREIGN_KIND_KEY}
    metadata[KIND_KEY] = info.kind.encode()
    metadata[FORM_KEY] = form.encode()
    return pa.field(field_.name, arrow_type, nullable=True, metadata=metadata)


def clip_conversion_error(name: str, current: str, wanted: str) -> str:
    """Why a column cannot move between the clip form and another asset form."""
    if current == "clip":
        return (
            f"column {name!r} holds video clips (mdr.datatype.video_clip()), which asset writers "
            f"cannot store as {wanted} values yet: write with assets=None to keep the clip "
            "references, or replace the column by each clip's MP4 bytes (mdr.read_clip) in a "
            "map step before writing"
        )
    return (
        f"column {name!r} holds {current} values, which cannot become video clips; "
        "declare mdr.datatype.video_clip() only on {path, from_timestamp, to_timestamp} columns"
    )

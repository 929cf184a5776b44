"""Which values an asset column accepts, checked before Arrow could convert them.

A path column holds strings, a bytes column bytes, a reference column
``{path, offset, size}`` mappings. Arrow would turn ``5`` or ``b"a.png"`` into the
path ``"5"`` or ``"a.png"`` when a column is cast to a declared path type, and a
later missing policy would then null or drop the row as if a file were missing.
These checks run first, so a value of the wrong type is an error under every
missing policy, naming the column, the row, the type found and the dtype to declare.

Example:
    >>> import pyarrow as pa, refiner_core as mdr
    >>> field = mdr.datatype.image_path().to_field("image")
    >>> check_arrow_column("image", pa.chunked_array([["a.png", None]]), field, where="demo")
    >>> check_arrow_column("image", pa.chunked_array([[5]]), field, where="demo")
    Traceback (most recent call last):
    ...
    TypeError: demo: column 'image' is declared image_path() but row 0 holds int64 value 5, not a path string. Declare dtypes={'image': mdr.datatype.int64()} if it is not an asset column, or store the paths as strings
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from . import datatype
from .datatype import asset_of

_BYTES = (bytes, bytearray, memoryview)
_WANTED = {
    "path": "a path string",
    "bytes": "inline bytes",
    "blob": "a {path, offset, size} reference",
    "clip": "a {path, from_timestamp, to_timestamp} clip",
}


def _declared_name(field: pa.Field) -> str:
    info = asset_of(field)
    assert info is not None
    name = f"blob_reference({info.kind!r})" if info.form == "blob" else f"{info.kind}_{info.form}()"
    return f"list_({name})" if info.is_list else name


def _suggestion(name: str, form: str, found: str, kind: str, is_list: bool = False) -> str:
    """The dtype that fits what the column holds."""
    if is_list:
        text = _suggestion(name, form, found, kind)
        return re.sub(r"(mdr\.datatype\.\w+\(\))", r"mdr.datatype.list_(\1)", text, count=1)
    if found in ("bytes", "binary", "large_binary"):
        return f"Declare dtypes={{{name!r}: mdr.datatype.{kind}_bytes()}} if the cells hold the media itself"
    if found in ("str", "string", "large_string") and form == "bytes":
        return f"Declare dtypes={{{name!r}: mdr.datatype.{kind}_path()}} if the cells are paths"
    if form == "blob":
        return "Store references as {path, offset, size} structs, or declare a plain type if it is not an asset column"
    plain = {"int": "int64", "float": "float64", "double": "float64", "bool": "bool_"}.get(
        found, found
    )
    store = "the paths as strings" if form == "path" else "the media as bytes"
    if hasattr(datatype, plain):
        return (
            f"Declare dtypes={{{name!r}: mdr.datatype.{plain}()}} if it is not an asset column, "
            f"or store {store}"
        )
    return (
        f"Store {_WANTED[form]} in every cell, or declare a plain type if it is not an asset column"
    )


def _fits_type(arrow_type: pa.DataType, form: str) -> bool:
    if pa.types.is_null(arrow_type):
        return True
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if form == "path":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if form == "bytes":
        return (
            pa.types.is_binary(arrow_type)
            or pa.types.is_large_binary(arrow_type)
            or pa.types.is_fixed_size_binary(arrow_type)
        )
    return pa.types.is_struct(arrow_type)


def _scalar_type(arrow_type: pa.DataType, is_list: bool) -> pa.DataType | None:
    if not is_list or pa.types.is_null(arrow_type):
        return arrow_type
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return arrow_type.value_type
    return None


def check_arrow_column(name: str, column: Any, field: pa.Field, *, where: str) -> None:
    """Raise ``TypeError`` when an Arrow column cannot hold the asset values ``field`` declares."""
    info = asset_of(field)
    if info is None:
        return
    scalar = _scalar_type(column.type, info.is_list)
    if scalar is not None and _fits_type(scalar, info.form):
        return
    row, value = _first_non_null(column)
    found = str(scalar if scalar is not None else column.type)
    raise TypeError(
        f"{where}: column {name!r} is declared {_declared_name(field)} but row {row} holds "
        f"{column.type} value {value!r}, not {_WANTED[info.form]}. "
        + _suggestion(name, info.form, found, info.kind, info.is_list)
    )


def _first_non_null(column: Any) -> tuple[int, Any]:
    offset = 0
    for chunk in getattr(column, "chunks", [column]):
        valid = chunk.is_valid()
        for i in range(len(chunk)):
            if valid[i].as_py():
                return offset + i, chunk[i].as_py()
        offset += len(chunk)
    return 0, None


def _fits_value(value: Any, form: str) -> bool:
    if form == "path":
        return isinstance(value, str)
    if form == "bytes":
        return isinstance(value, _BYTES)
    return isinstance(value, Mapping)


def check_python_values(
    name: str, values: list[Any], field: pa.Field, *, shard_id: str | None, first_row: int
) -> None:
    """Raise ``TypeError`` naming the first value of ``values`` that ``field``'s asset form
    does not accept (before Arrow converts bytes to a string or the reverse)."""
    info = asset_of(field)
    if info is None:
        return
    for i, value in enumerate(values):
        if value is None:
            continue
        elements = value if info.is_list and isinstance(value, (list, tuple)) else [value]
        for element in elements:
            if element is None or _fits_value(element, info.form):
                continue
            found = type(element).__name__
            raise TypeError(
                f"column {name!r} is declared {_declared_name(field)} but row {first_row + i} "
                f"of shard {shard_id} holds {found} value {_short(element)}, not "
                f"{_WANTED[info.form]}. "
                + _suggestion(name, info.form, found, info.kind, info.is_list)
            )


def _short(value: Any) -> str:
    if isinstance(value, _BYTES):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

"""The immutable row handed to every callback."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class Row(Mapping[str, Any]):
    """An immutable mapping of column name to value.

    Columns are reachable as items and as attributes; mapping methods
    (``keys``, ``get``, ``items`` …) win over columns of the same name.

    Example:
        >>> row = Row({"text": "pick cube", "num_frames": 120})
        >>> row.num_frames, row["text"]
        (120, 'pick cube')
        >>> row.update({"label": "short"}).drop("text").to_dict()
        {'num_frames': 120, 'label': 'short'}
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None, /, **columns: Any) -> None:
        merged = dict(data) if data is not None else {}
        if columns:
            merged.update(columns)
        object.__setattr__(self, "_data", merged)

    @classmethod
    def _wrap(cls, data: dict[str, Any]) -> Row:
        """Wrap a dict the caller promises not to mutate afterwards (no copy)."""
        row = cls.__new__(cls)
        object.__setattr__(row, "_data", data)
        return row

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            columns = ", ".join(map(repr, self._data)) or "none"
            raise AttributeError(f"row has no column {name!r} (columns: {columns})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Row is immutable; use row.update({{{name!r}: ...}}) for a new row")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Row is immutable; use row.drop({name!r}) for a new row")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Row({self._data!r})"

    def __reduce__(self):
        return (Row, (self._data,))

    def update(self, mapping: Mapping[str, Any] | None = None, /, **columns: Any) -> Row:
        """Return a new row with ``mapping`` and ``columns`` set."""
        data = dict(self._data)
        if mapping is not None:
            data.update(mapping)
        if columns:
            data.update(columns)
        return Row._wrap(data)

    def drop(self, *keys: str) -> Row:
        """Return a new row without ``keys``; a key that is not present raises ``KeyError``."""
        missing = [k for k in keys if k not in self._data]
        if missing:
            raise KeyError(f"cannot drop missing column(s) {missing}; row has {list(self._data)}")
        return Row._wrap({k: v for k, v in self._data.items() if k not in keys})

    def to_dict(self) -> dict[str, Any]:
        """Return a plain ``dict`` copy of the row."""
        return dict(self._data)

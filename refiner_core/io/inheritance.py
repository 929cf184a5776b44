"""Versions that share files: what an appended dataset version inherits from its parent.

An appended version of a dataset folder holds only its new shards; the table files,
blocks and copied media of the versions before it stay where they were written and
are shared, never copied or rewritten (blocks are immutable, and references in the
inherited tables keep pointing at them). The version folder's
``_refiner/inherits.json`` says what it shares, as paths relative to the dataset
(partition) folder that holds the versions::

    <dataset>/
        v-parent/part-00000.parquet   ...   assets/.../block-00000.bin
        v-child/_refiner/inherits.json      {"parent": "v-parent",
                                             "tables": ["v-parent/part-00000.parquet"],
                                             "files": [...every inherited file...],
                                             "rows": 1000}

Readers of a committed version read its own table files and then the inherited ones
(:func:`inherited_tables`); whoever deletes versions keeps every file a remaining
version lists in ``files``.

Example:
    >>> import fsspec, tempfile
    >>> fs = fsspec.filesystem("file")
    >>> dataset = tempfile.mkdtemp()
    >>> child = Inheritance("v-a", tables=("v-a/part-0.parquet",), files=("v-a/part-0.parquet",), rows=3)
    >>> write_inheritance(fs, f"{dataset}/v-b", child)
    >>> read_inheritance(fs, f"{dataset}/v-b").rows
    3
    >>> inherited_tables(fs, f"{dataset}/v-b", (".parquet",)) == [f"{dataset}/v-a/part-0.parquet"]
    True
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any

from .datafile import is_s3, read_object

INHERITS_PATH = "_refiner/inherits.json"


@dataclass(frozen=True)
class Inheritance:
    """What one version shares with the versions before it.

    ``parent`` is the version it was appended to; ``tables`` the inherited table files
    and ``files`` every inherited file (tables included), both relative to the dataset
    folder; ``rows`` the inherited tables' row count.
    """

    parent: str
    tables: tuple[str, ...]
    files: tuple[str, ...]
    rows: int

    def as_json(self) -> dict[str, Any]:
        return {
            "parent": self.parent,
            "tables": list(self.tables),
            "files": list(self.files),
            "rows": self.rows,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Inheritance:
        try:
            return cls(
                parent=str(data["parent"]),
                tables=tuple(str(t) for t in data["tables"]),
                files=tuple(str(f) for f in data["files"]),
                rows=int(data["rows"]),
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(
                f"{where} is not a valid inheritance record ({exc!r}); it is written by refiner "
                "when an append begins: materialize the dataset asset again"
            ) from exc

    def extended(self, parent: str, own_tables: list[str], own_files: list[str], own_rows: int):
        """The inheritance of a version appended to ``parent``, which inherited ``self``
        and wrote ``own_*`` itself (paths relative to ``parent``'s folder)."""
        return Inheritance(
            parent=parent,
            tables=self.tables + tuple(posixpath.join(parent, t) for t in own_tables),
            files=self.files + tuple(posixpath.join(parent, f) for f in own_files),
            rows=self.rows + own_rows,
        )


NOTHING = Inheritance(parent="", tables=(), files=(), rows=0)


def read_inheritance(fs: Any, version_folder: str) -> Inheritance | None:
    """The inheritance recorded in ``version_folder``, or ``None`` (not an appended version)."""
    path = posixpath.join(version_folder.rstrip("/"), INHERITS_PATH)
    try:
        data = json.loads(read_object(fs, path))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from exc
    return Inheritance.from_json(data, path)


def write_inheritance(fs: Any, version_folder: str, inheritance: Inheritance) -> None:
    """Record ``inheritance`` in ``version_folder`` (before the version's shards are written)."""
    path = posixpath.join(version_folder.rstrip("/"), INHERITS_PATH)
    if not is_s3(fs):  # S3 has no folders: making one only asks whether the bucket exists
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with fs.open(path, "wb") as f:
        f.write(json.dumps(inheritance.as_json(), indent=1).encode())


def inherited_tables(fs: Any, version_folder: str, suffixes: tuple[str, ...]) -> list[str]:
    """Paths of the table files (ending in ``suffixes``) ``version_folder`` inherits, in
    the order they were written (oldest version first)."""
    inheritance = read_inheritance(fs, version_folder)
    if inheritance is None:
        return []
    dataset = posixpath.dirname(version_folder.rstrip("/"))
    return [posixpath.join(dataset, t) for t in inheritance.tables if t.endswith(suffixes)]

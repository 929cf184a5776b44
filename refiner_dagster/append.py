"""Appending to a dataset: a new version made of the published one's files plus new shards.

With ``refiner/mode: append`` (asset metadata, or ``build_dataset_asset(mode="append")``)
a materialization writes only its new rows. The version it begins over (the one readers
saw then; a version is published only over that one, :mod:`.one_publisher`) becomes its
parent: the parent's table files, blocks and copied media, and everything the parent
itself inherited, are listed in the new version's ``_refiner/inherits.json`` and in its
record (``inherits``), and stay where they are. Nothing old is copied, re-linked or
rewritten. Readers of the new version read its own tables and then the inherited ones.
A Lance version is Lance's shallow clone of its parent (the parent's data files are
referenced, not copied) with the new fragments appended. With ``refiner/dedupe: content``
media equal to media the parent already stores is not stored again: the new cell
references the parent's block.

Garbage collection (:meth:`~refiner_dagster.storage.DatasetStorage.cleanup`) deletes a
file only when no remaining version lists it (its record's ``inherits``); a version folder
whose record is gone but whose files are still inherited stays until they are not.

Before an appended version is published its new rows' schema must match the parent's
(:func:`check_append_schema`); the audit checks the new references fully and a seeded
sample of the inherited ones.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_dagster.storage import DatasetStorage
    >>> storage = DatasetStorage(tempfile.mkdtemp())
    >>> first = storage.begin(["t"], None, "v-1", {"mode": "append"})
    >>> start_append(first) is None  # nothing published yet: a first write
    True
"""

from __future__ import annotations

import posixpath

import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr
from refiner_core import integration
from refiner_core.io import INHERITS_PATH, Inheritance, read_inheritance, write_inheritance

from .storage import DatasetVersion

APPEND = "append"
# Where a writer with content dedupe keeps the digests of what it stored.
DIGEST_INDEX_DIR = "_refiner/digests"
_PRIVATE_DIR = "_refiner"


class AppendSchemaMismatch(mdr.RefinerError, ValueError):
    """An appended version's new rows do not fit the table they are appended to."""


def start_append(version: DatasetVersion) -> Inheritance | None:
    """Make ``version`` (just begun) inherit the version readers saw when it began.

    Records the inheritance in the version folder and its record; returns it, or
    ``None`` when nothing was published yet (the append is a first write). A version
    resumed by the same run keeps the inheritance it recorded first.
    """
    fs, path = version.folder.fs, version.folder.path
    folder = posixpath.join(path, version.name)
    recorded = read_inheritance(fs, folder)
    if recorded is not None:
        return recorded
    base = version.record.get("base_version")
    if not base:
        return None
    parent = version.storage.version(version.asset_path, version.partition_key, base)
    if version.format == "lance":
        inheritance = _share_lance(version, parent)
    else:
        inheritance = inheritance_after(parent)
    write_inheritance(fs, folder, inheritance)
    version.storage.record(
        version,
        inherits=list(inheritance.files),
        inherited_rows=inheritance.rows,
        append_parent=parent.name,
        **_dedupe_against(version, parent),
    )
    return inheritance


def _share_lance(version: DatasetVersion, parent: DatasetVersion) -> Inheritance:
    """A Lance version appended to ``parent``: Lance's shallow clone of it (its data files
    referenced, not copied), to which the write stage appends the new fragments."""
    summary = parent.summary()
    if summary is None:
        raise FileNotFoundError(
            f"{parent.describe()} has no finalization summary, so there is nothing to append "
            "to; materialize the asset once without refiner/mode: append"
        )
    version.folder.rm(version.name, recursive=True)  # a try that died before it recorded
    shared = integration.share_lance_dataset(
        parent.url, version.url, version.storage_options or None
    )
    fs, folder = parent.folder.fs, posixpath.join(parent.folder.path, parent.name)
    before = read_inheritance(fs, folder) or Inheritance(parent.name, (), (), 0)
    return before.extended(parent.name, [], sorted(shared), summary.rows_written)


def _dedupe_against(version: DatasetVersion, parent: DatasetVersion) -> dict[str, list[str]]:
    """With ``refiner/dedupe: content``, the parent's packed assets count as stored (when
    the parent kept a digest index: it was written with content dedupe too)."""
    if (version.record.get("assets") or {}).get("dedupe") != "content":
        return {}
    if not parent.output_folder().exists(DIGEST_INDEX_DIR):
        return {}
    return {"dedupe_against": [parent.url]}


def inheritance_after(parent: DatasetVersion) -> Inheritance:
    """What a version appended to ``parent`` inherits: what ``parent`` inherited, plus
    every file ``parent`` wrote itself (its ``_refiner/`` bookkeeping excepted)."""
    fs, dataset = parent.folder.fs, parent.folder.path
    folder = posixpath.join(dataset, parent.name)
    summary = parent.summary()
    if summary is None:
        raise FileNotFoundError(
            f"{parent.describe()} has no finalization summary, so there is nothing to append "
            "to; materialize the asset once without refiner/mode: append"
        )
    found = [posixpath.relpath(p, folder) for p in fs.find(folder)]
    own_files = [p for p in found if not p.startswith(_PRIVATE_DIR + "/")]
    inherited = read_inheritance(fs, folder) if INHERITS_PATH in found else None
    before = inherited or Inheritance(parent.name, (), (), 0)
    return before.extended(
        parent.name, list(summary.files), sorted(own_files), summary.rows_written
    )


def version_inheritance(version: DatasetVersion) -> Inheritance | None:
    """The inheritance ``version`` records (``None`` for a version written whole)."""
    mode = version.record.get("mode")
    if mode is not None and mode != APPEND:  # written whole: it inherits nothing
        return None
    return read_inheritance(version.folder.fs, posixpath.join(version.folder.path, version.name))


def check_append_schema(version: DatasetVersion, summary: mdr.DatasetSummary) -> None:
    """Refuse new rows whose columns differ from the inherited table's, naming each.

    ``summary`` is the version's own finalization summary (its new table files).
    """
    inheritance = version_inheritance(version)
    own_first = next((f for f in summary.files if f.endswith(".parquet")), None)
    if own_first is None or inheritance is None or not inheritance.tables:
        return
    inherited = inherited_schema(version, inheritance)
    if inherited is None:
        return
    with version.output_folder().file(own_first).open("rb") as f:
        own = pq.read_schema(f)
    problems = []
    for field in inherited:
        if field.name not in own.names:
            problems.append(f"column {field.name!r} ({field.type}) is missing from the new rows")
        elif not own.field(field.name).type.equals(field.type):
            problems.append(
                f"column {field.name!r} is {own.field(field.name).type} in the new rows but "
                f"{field.type} in {inheritance.parent}"
            )
    problems += [
        f"column {f.name!r} ({f.type}) is new: {inheritance.parent} has no such column"
        for f in own
        if f.name not in inherited.names
    ]
    if problems:
        raise AppendSchemaMismatch(
            f"{version.describe()} cannot be appended to {inheritance.parent}: "
            + "; ".join(problems)
            + ". Write the new rows with the parent's columns and types, or materialize "
            "without refiner/mode: append to write the dataset whole with the new schema. "
            "Nothing was published; readers still see the parent"
        )


def inherited_schema(version: DatasetVersion, inheritance: Inheritance) -> pa.Schema | None:
    """The Arrow schema of the first inherited Parquet table (``None`` for JSONL)."""
    first = next((t for t in inheritance.tables if t.endswith(".parquet")), None)
    if first is None:
        return None
    with version.folder.file(first).open("rb") as f:
        return pq.read_schema(f)

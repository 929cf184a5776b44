"""Deleting dataset versions whose files later versions may share.

A version written whole owns its folder, and deleting it is one recursive delete. An
appended version (:mod:`refiner_dagster.append`) lists in its record (``inherits``) the
files it shares with the versions before it, relative to the dataset folder. Deleting a
version then removes only the files no remaining version lists; the rest of its folder
stays (without a record) until the last version listing them is deleted too, when
:func:`sweep_unrecorded` removes it.

Example:
    >>> import os, tempfile, refiner_core as mdr
    >>> dataset = mdr.DataFolder(tempfile.mkdtemp())
    >>> for name in ("v-1/part-0.parquet", "v-1/_refiner/summary.json", "v-1/assets/b.bin"):
    ...     dataset.write_bytes(name, b"x")
    >>> delete_version_files(dataset, "v-1", keep={"v-1/part-0.parquet"})
    2
    >>> sorted(os.listdir(dataset.path + "/v-1"))
    ['part-0.parquet']
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Iterable

import refiner_core as mdr
from refiner_core.io import VERSION_PREFIX, is_local, is_s3fs


def delete_version_files(dataset: mdr.DataFolder, name: str, keep: set[str]) -> int:
    """Delete version ``name``'s folder in ``dataset`` but the files in ``keep`` (paths
    relative to ``dataset``); returns how many files were deleted. On S3 the files are
    found with one listing and deleted in batches; elsewhere, with nothing kept, the
    folder goes in one recursive delete."""
    fs, root = dataset.fs, dataset.path.rstrip("/")
    if not is_s3fs(fs) and not any(k.startswith(name + "/") for k in keep):
        existed = dataset.exists(name)
        dataset.rm(name, recursive=True)
        return int(existed)
    doomed = [p for p in _files_below(dataset, name) if posixpath.relpath(p, root) not in keep]
    if doomed:
        fs.rm(doomed)
    if is_local(fs):  # object stores have no folders to leave behind
        _remove_empty_folders(posixpath.join(root, name))
    return len(doomed)


def _files_below(dataset: mdr.DataFolder, name: str) -> list[str]:
    """Paths of the files in ``dataset``'s folder ``name`` (s3fs lists a missing folder
    with one request given a prefix, where it would also ask ``HEAD`` for ``name``)."""
    fs, root = dataset.fs, dataset.path.rstrip("/")
    try:
        if is_s3fs(fs):
            return list(fs.find(root, prefix=name + "/"))
        return list(fs.find(posixpath.join(root, name)))
    except FileNotFoundError:
        return []


def _remove_empty_folders(top: str) -> None:
    for folder, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):  # not empty: it holds a kept file
            os.rmdir(folder)


def sweep_unrecorded(dataset: mdr.DataFolder, recorded: Iterable[str], keep: set[str]) -> int:
    """Delete what is left of version folders that no longer have a record (deleted
    versions whose files were still shared), but the files in ``keep``."""
    known = set(recorded)
    fs, root = dataset.fs, dataset.path.rstrip("/")
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        name = posixpath.basename(entry["name"].rstrip("/"))
        if entry["type"] == "directory" and name.startswith(VERSION_PREFIX) and name not in known:
            removed += delete_version_files(dataset, name, keep)
    return removed

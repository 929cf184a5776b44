"""Expanding user inputs (paths, globs, folders, lists) into concrete files."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from ..io.datafile import full_url, resolve
from ..io.versions import Wanted, check_version, version_folder
from ..manifests._attempts import LAYOUT_PATH
from .committed import REFINER_DIR, committed_files, holds_output


def expand_inputs(
    inputs: Any,
    *,
    suffixes: tuple[str, ...],
    storage_options: dict[str, Any] | None,
    what: str,
    uncommitted: bool = False,
    version: Wanted = None,
) -> list[tuple[Any, str]]:
    """Return ``(fs, path)`` for every file named by ``inputs``, sorted and de-duplicated.

    A folder is searched recursively for files ending in ``suffixes``, skipping
    entries whose name starts with ``_`` or ``.`` and the asset folders recorded by
    a refiner writer. A refiner output folder (one with ``_refiner/``) gives the
    files its finalization summary lists (see :mod:`refiner_core.sources.committed`);
    ``uncommitted=True`` gives every data file in it instead. A versioned dataset
    folder (one with ``_current.json``, met anywhere below a folder input) gives its
    published version's files, or those of ``version`` for a folder input that is one
    (see :mod:`refiner_core.io.versions`).
    """
    version = check_version(version, what)
    items = [inputs] if isinstance(inputs, str) else list(inputs or [])
    if not items:
        raise ValueError(f"{what}: no inputs given; pass a path, glob, folder or list of them")
    found: dict[str, tuple[Any, str]] = {}
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{what}: inputs must be strings, got {item!r}")
        fs, path = resolve(item, storage_options)
        # A path that exists is never a glob: "take[1].parquet" names that one file.
        if any(ch in path for ch in "*?[") and not fs.exists(path):
            matches = sorted(fs.glob(path))
            if not matches:
                raise FileNotFoundError(f"{what}: glob {item!r} matched no files")
            for m in matches:
                if fs.isdir(m):
                    for f in _walk(fs, m, suffixes, what, uncommitted, version):
                        found[full_url(fs, f)] = (fs, f)
                else:
                    found[full_url(fs, m)] = (fs, m)
        elif fs.isdir(path):
            files = _walk(fs, path, suffixes, what, uncommitted, version)
            if not files:
                raise FileNotFoundError(
                    f"{what}: folder {item!r} holds no files ending in {', '.join(suffixes)}"
                )
            for f in files:
                found[full_url(fs, f)] = (fs, f)
        elif fs.exists(path):
            if version is not None:
                raise ValueError(
                    f"{what}: version/as_of={version!r} names a version of a dataset folder, "
                    f"but {item!r} is a file; pass the dataset folder, or drop it"
                )
            found[full_url(fs, path)] = (fs, path)
        else:
            raise FileNotFoundError(f"{what}: input {item!r} does not exist")
    return [found[k] for k in sorted(found)]


def _asset_subdirs(fs, folder: str) -> set[str]:
    layout = posixpath.join(folder, LAYOUT_PATH)
    try:
        with fs.open(layout, "rb") as f:
            return set(json.load(f).get("asset_subdirs", []))
    except (FileNotFoundError, ValueError, OSError):
        return set()


def _walk(
    fs,
    folder: str,
    suffixes: tuple[str, ...],
    what: str,
    uncommitted: bool = False,
    version: Wanted = None,
) -> list[str]:
    top = folder.rstrip("/")
    skip = {posixpath.join(top, d) for d in _asset_subdirs(fs, folder)}
    out: list[str] = []
    stack = [top]
    while stack:
        current = stack.pop()
        entries = fs.ls(current, detail=True)
        wanted = version if current == top else None
        chosen = version_folder(fs, current, wanted, what=what, entries=entries)
        if chosen is not None:
            stack.append(chosen)
            continue
        if not uncommitted and any(
            e["type"] == "directory"
            and posixpath.basename(e["name"].rstrip("/")) == REFINER_DIR
            and holds_output(fs, e["name"].rstrip("/"))
            for e in entries
        ):
            out.extend(committed_files(fs, current, suffixes, what=what, url=full_url(fs, current)))
            continue
        for entry in entries:
            name = entry["name"].rstrip("/")
            base = posixpath.basename(name)
            if base.startswith(("_", ".")) or name in skip:
                continue
            if entry["type"] == "directory":
                stack.append(name)
            elif base.endswith(suffixes):
                out.append(name)
    return sorted(out)

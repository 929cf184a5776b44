"""Versioned dataset folders: which version folder a reader reads.

A dataset published by ``refiner_dagster`` (and shown by the ``refiner`` command) is a
folder of versions with a pointer naming the published one::

    <dataset>/[<partition>/]
        _current.json            {"version": "v-<id>", ...}: the published version
        _versions/v-<id>.json    one record per version
        v-<id>/                  one version's table files, assets/ and _refiner/

Readers given such a folder read only its published version, so rows of a version that
failed its audit or is still being written never mix in. ``version="v-<id>"`` reads
another version that is still on disk, and ``as_of=datetime`` the version that was
published at that moment (from the pointer's history, :mod:`.version_history`). The
version is chosen when the stage plans.

Example:
    >>> import json, os, tempfile, fsspec
    >>> dataset = tempfile.mkdtemp()
    >>> for name in ("v-old", "v-new"):
    ...     os.makedirs(os.path.join(dataset, name))
    >>> _ = open(os.path.join(dataset, CURRENT_POINTER), "w").write(json.dumps({"version": "v-old"}))
    >>> fs = fsspec.filesystem("file")
    >>> version_folder(fs, dataset, None, what="read_parquet") == os.path.join(dataset, "v-old")
    True
    >>> version_folder(fs, dataset, "v-new", what="read_parquet") == os.path.join(dataset, "v-new")
    True
"""

from __future__ import annotations

import json
import posixpath
from datetime import datetime
from typing import Any

from ..errors import RefinerError
from .datafile import full_url, read_object
from .version_history import check_as_of, first_published, utc, version_at

CURRENT_POINTER = "_current.json"
VERSIONS_DIR = "_versions"
VERSION_PREFIX = "v-"

# The version a reader asks for: a version folder's name, the moment it was published
# (``as_of=``), or ``None`` for the published one.
Wanted = str | datetime | None


class UnknownVersion(RefinerError, FileNotFoundError):
    """The dataset version to read is not on disk (or none is published); the message
    names the versions that are."""


def read_pointer(fs: Any, folder: str) -> dict[str, Any] | None:
    """The parsed ``_current.json`` of dataset folder ``folder``, or ``None`` when it has none.

    A pointer that is not a JSON object naming a ``version`` raises ``ValueError``.
    """
    path = posixpath.join(folder.rstrip("/"), CURRENT_POINTER)
    # the pointer is rewritten in place: a size or ETag cached by the filesystem (s3fs)
    # from before the last publish would make the read fail or return the old pointer
    fs.invalidate_cache(path)
    try:
        data = read_object(fs, path)
    except FileNotFoundError:
        return None
    try:
        pointer = json.loads(data)
    except ValueError as exc:
        raise ValueError(
            f"{full_url(fs, path)} is not valid JSON ({exc}); publish a version again"
        ) from exc
    if not isinstance(pointer, dict) or not isinstance(pointer.get("version"), str):
        raise ValueError(
            f'{full_url(fs, path)} names no version (expected {{"version": "v-..."}}); '
            "publish a version again"
        )
    return pointer


def check_version(version: Any, what: str, as_of: Any = None) -> Wanted:
    """What to read: ``version`` when it is ``None`` or a version folder name
    (``"v-..."``), else ``as_of`` when it is an aware ``datetime`` (never both)."""
    moment = check_as_of(as_of, what)
    if moment is not None and version is not None:
        raise ValueError(
            f"{what}: both version={version!r} and as_of={as_of!r} were given; pass one of them"
        )
    if moment is not None:
        return moment
    if isinstance(version, datetime):  # an ``as_of`` checked once already
        return check_as_of(version, what)
    if version is None or (isinstance(version, str) and version.startswith(VERSION_PREFIX)):
        return version
    raise ValueError(
        f"{what}: version={version!r} is not a dataset version; pass a version folder's "
        f"name such as '{VERSION_PREFIX}0123456789ab', or None for the published version"
    )


def version_folder(
    fs: Any,
    folder: str,
    version: Wanted,
    *,
    what: str,
    entries: list[dict[str, Any]] | None = None,
) -> str | None:
    """The path of the version folder to read in ``folder``, or ``None`` when ``folder``
    is not a versioned dataset folder (and no ``version`` was asked for).

    ``entries`` is ``fs.ls(folder, detail=True)`` when the caller already listed it.
    The published version is read unless ``version`` names another one, or is a
    ``datetime`` (the version published at that moment); a version that is not on disk,
    a moment before anything was published, or a dataset with no published version,
    raises :class:`UnknownVersion` naming the versions on disk.
    """
    folder = folder.rstrip("/")
    if entries is None:
        try:
            entries = fs.ls(folder, detail=True)
        except FileNotFoundError:
            entries = []
    names = {_name(e) for e in entries}
    on_disk = sorted(
        _name(e)
        for e in entries
        if e["type"] == "directory" and _name(e).startswith(VERSION_PREFIX)
    )
    if VERSIONS_DIR in names:
        # a folder whose record retention deleted holds only files later versions share
        on_disk = [n for n in on_disk if n in _recorded(fs, folder)]
    pointer = read_pointer(fs, folder) if CURRENT_POINTER in names else None
    if pointer is None and not (VERSIONS_DIR in names and on_disk):
        if version is not None:
            given = (
                f"as_of={version.isoformat()}"
                if isinstance(version, datetime)
                else (f"version={version!r}")
            )
            raise UnknownVersion(
                f"{what}: {given} was given but {full_url(fs, folder)} is not a "
                f"versioned dataset folder (it has no {CURRENT_POINTER}); pass the dataset "
                "folder that holds the version, or drop it"
            )
        return None
    published = pointer["version"] if pointer is not None else None
    if isinstance(version, datetime):
        return _as_of_folder(fs, folder, pointer, version, on_disk, published, what)
    wanted = version or published
    if wanted is not None and wanted in on_disk:
        return posixpath.join(folder, wanted)
    listed = ", ".join(f"{n} (published)" if n == published else n for n in on_disk)
    listed = listed or "none"
    if wanted is None:
        raise UnknownVersion(
            f"{what}: {full_url(fs, folder)} is a dataset folder with no published version "
            f"({CURRENT_POINTER} is missing); versions on disk: {listed}. Pass "
            "version='<one of them>' to read one anyway, or publish one first"
        )
    if version is None:
        raise UnknownVersion(
            f"{what}: {full_url(fs, folder)}/{CURRENT_POINTER} publishes {wanted}, which is not "
            f"on disk (versions on disk: {listed}); publish a version again, or pass "
            "version='<one of them>'"
        )
    raise UnknownVersion(
        f"{what}: {full_url(fs, folder)} has no version {version!r} on disk; versions on disk: "
        f"{listed}. Pass one of them, or leave version unset to read the published one"
    )


def _as_of_folder(
    fs: Any,
    folder: str,
    pointer: dict[str, Any] | None,
    moment: datetime,
    on_disk: list[str],
    published: str | None,
    what: str,
) -> str:
    wanted = version_at(pointer, moment)
    listed = ", ".join(f"{n} (published)" if n == published else n for n in on_disk) or "none"
    if wanted is None:
        earliest = first_published(pointer)
        since = (
            f"its earliest recorded publish was at {earliest.isoformat()}"
            if earliest is not None
            else "it records no publish time"
        )
        raise UnknownVersion(
            f"{what}: dataset {full_url(fs, folder)} had no published version at "
            f"{moment.isoformat()} ({utc(moment.timestamp()).isoformat()}); {since}. Pass a "
            "later as_of=, or version='<one of the versions on disk>': " + listed
        )
    if wanted not in on_disk:
        raise UnknownVersion(
            f"{what}: dataset {full_url(fs, folder)} published {wanted} at "
            f"{moment.isoformat()}, but that version is no longer on disk (its retention "
            f"policy deleted it); versions on disk: {listed}. Pass a later as_of=, or keep "
            "more versions (keep_versions / keep_for on the IO manager)"
        )
    return posixpath.join(folder, wanted)


def _recorded(fs: Any, folder: str) -> set[str]:
    """Names of the versions with a record in ``folder``'s ``_versions/``."""
    try:
        listed = fs.ls(posixpath.join(folder, VERSIONS_DIR), detail=False)
    except FileNotFoundError:
        return set()
    return {
        base[: -len(".json")]
        for base in (posixpath.basename(p.rstrip("/")) for p in listed)
        if base.endswith(".json")
    }


def _name(entry: dict[str, Any]) -> str:
    return posixpath.basename(entry["name"].rstrip("/"))

"""What an output folder holds, read from storage: summary, attempt manifests, versions.

This is the one place the ``refiner`` command reads refiner's own records:

- ``<output>/_refiner/summary.json``: the finalization summary;
- ``<output>/_refiner/attempts/<shard>__<attempt>.json``: one manifest per attempt;
- a Dagster dataset's asset folder: ``_current.json`` (the published version) and
  ``_versions/<version>.json`` (every version's record) beside the ``v-<run>/`` folders.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.cli.storage import open_output
    >>> out = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"n": 1}, {"n": 2}]).write_parquet(out).launch_local()
    >>> stored = open_output(out)
    >>> stored.finalized, stored.summary["rows_written"], len(stored.attempts)
    (True, 2, 1)
"""

from __future__ import annotations

import functools
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from ..errors import RefinerError
from ..io import CURRENT_POINTER as POINTER
from ..io import VERSIONS_DIR as VERSIONS
from ..io import DataFolder, Inheritance, read_inheritance

STATE_DIR = "_refiner"
SUMMARY = f"{STATE_DIR}/summary.json"
ATTEMPTS = f"{STATE_DIR}/attempts"
LAYOUT = f"{STATE_DIR}/layout.json"


class NotAnOutput(RefinerError, ValueError):
    """The folder is neither a refiner output folder nor a Dagster dataset's folder."""


@dataclass(frozen=True)
class Attempt:
    """One write attempt of one shard, as its manifest recorded it."""

    shard_id: str
    attempt_id: str
    run_id: str
    completed_at: float
    files: tuple[str, ...]
    asset_dirs: tuple[str, ...]
    counters: dict[str, int]

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> Attempt:
        return cls(
            shard_id=str(manifest.get("shard_id", "")),
            attempt_id=str(manifest.get("attempt_id", "")),
            run_id=str(manifest.get("run_id", "")),
            completed_at=float(manifest.get("completed_at") or 0.0),
            files=tuple(manifest.get("files") or ()),
            asset_dirs=tuple(manifest.get("asset_dirs") or ()),
            counters={k: int(v) for k, v in (manifest.get("counters") or {}).items()},
        )


@dataclass(frozen=True)
class StoredOutput:
    """An output folder as it is on storage (for a Dagster dataset: the version shown)."""

    requested: str
    folder: DataFolder
    summary: dict[str, Any] | None
    attempts: tuple[Attempt, ...]
    layout: dict[str, Any] = field(default_factory=dict)
    version: dict[str, Any] | None = None  # the Dagster version record, when there is one
    pointer: dict[str, Any] | None = None  # the dataset's _current.json, when there is one
    versions: tuple[str, ...] = ()  # every version name of the dataset

    @property
    def url(self) -> str:
        return self.folder.url

    @property
    def finalized(self) -> bool:
        return self.summary is not None

    @property
    def format(self) -> str:
        for source in (self.summary, self.layout, self.version):
            if source and source.get("format"):
                return str(source["format"])
        return "parquet"

    @property
    def files(self) -> list[str]:
        """Table files relative to the folder: the summary's list, else every attempt's."""
        if self.summary is not None:
            return list(self.summary.get("files") or [])
        return sorted({f for a in self.attempts for f in a.files})

    @functools.cached_property
    def inheritance(self) -> Inheritance | None:
        """What an appended dataset version shares with the versions before it."""
        return read_inheritance(self.folder.fs, self.folder.path)

    @property
    def tables(self) -> list[str]:
        """Every table file the output reads: its own (relative to the folder), then, for
        an appended version, those it shares (``../v-<id>/...``)."""
        shared = self.inheritance.tables if self.inheritance is not None else ()
        return self.files + [f"../{t}" for t in shared]

    def table_path(self, name: str) -> str:
        """The filesystem path of a name :attr:`tables` lists."""
        if name.startswith("../"):
            dataset = DataFolder(
                posixpath.dirname(self.folder.url.rstrip("/")), self.storage_options or None
            )
            return dataset.join(name[3:])
        return self.folder.join(name)

    @property
    def rows_inherited(self) -> int:
        return self.inheritance.rows if self.inheritance is not None else 0

    @property
    def asset_dirs(self) -> list[str]:
        if self.summary is not None:
            return list(self.summary.get("asset_dirs") or [])
        return sorted({d for a in self.attempts for d in a.asset_dirs})

    @property
    def target_bytes(self) -> int | None:
        """The block size target the version was packed with, when it was recorded."""
        assets = (self.version or {}).get("assets") or {}
        value = assets.get("target_bytes")
        return int(value) if value else None

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.folder.storage_options


def _read_json(folder: DataFolder, relative: str) -> dict[str, Any] | None:
    if not folder.exists(relative):
        return None
    try:
        return json.loads(folder.read_bytes(relative))
    except ValueError as exc:
        raise NotAnOutput(f"{folder.url_of(relative)} is not valid JSON ({exc})") from exc


def read_attempts(folder: DataFolder) -> tuple[Attempt, ...]:
    """Every attempt manifest under ``folder``, in completion order."""
    attempts = []
    for name in folder.listdir(ATTEMPTS):
        if name.endswith(".json") and not name.startswith("."):
            manifest = _read_json(folder, f"{ATTEMPTS}/{name}")
            if manifest is not None:
                attempts.append(Attempt.from_manifest(manifest))
    return tuple(sorted(attempts, key=lambda a: (a.completed_at, a.shard_id, a.attempt_id)))


def _read_output(
    requested: str, folder: DataFolder, dataset: DataFolder | None, pointer: dict | None
) -> StoredOutput:
    version = None
    versions: tuple[str, ...] = ()
    if dataset is not None:
        name = posixpath.basename(folder.path.rstrip("/"))
        version = _read_json(dataset, f"{VERSIONS}/{name}.json")
        versions = tuple(
            n.removesuffix(".json") for n in dataset.listdir(VERSIONS) if n.endswith(".json")
        )
    return StoredOutput(
        requested=requested,
        folder=folder,
        summary=_read_json(folder, SUMMARY),
        attempts=read_attempts(folder),
        layout=_read_json(folder, LAYOUT) or {},
        version=version,
        pointer=pointer,
        versions=versions,
    )


def open_output(url: str, storage_options: dict[str, Any] | None = None) -> StoredOutput:
    """The output at ``url``: an output folder, a dataset version folder, or a Dagster
    dataset's asset folder (its published version is shown).

    Raises :class:`NotAnOutput` naming what was looked for when ``url`` is none of them.
    """
    folder = DataFolder(url, storage_options)
    if not folder.exists():
        raise NotAnOutput(f"{url} does not exist (check the path, or --storage-option for S3)")
    parent = DataFolder(posixpath.dirname(folder.url.rstrip("/")), storage_options)
    # a dataset's asset folder has a _refiner/ of its own too (its publishers' owner
    # records), and a Lance dataset a _versions/ folder: the pointer tells them apart
    if folder.exists(STATE_DIR) and not folder.exists(POINTER):
        dataset = parent if parent.exists(VERSIONS) else None
        return _read_output(url, folder, dataset, _read_json(parent, POINTER) if dataset else None)
    pointer = _read_json(folder, POINTER)
    if pointer is not None:
        name = str(pointer.get("version") or "")
        version_url = str(pointer.get("url") or folder.url_of(name))
        return _read_output(url, DataFolder(version_url, storage_options), folder, pointer)
    if folder.exists(VERSIONS):
        names = sorted(n.removesuffix(".json") for n in folder.listdir(VERSIONS))
        raise NotAnOutput(
            f"{url} is a Dagster dataset folder with no published version ({POINTER} is "
            f"missing); pass one of its version folders: {', '.join(names) or '(none)'}"
        )
    children = [n for n in folder.listdir() if folder.exists(f"{n}/{POINTER}")]
    hint = f"; its partitions or datasets: {', '.join(children)}" if children else ""
    raise NotAnOutput(
        f"{url} is not a refiner output: it has no {STATE_DIR}/ folder (an output folder) and "
        f"no {POINTER} (a Dagster dataset folder){hint}"
    )

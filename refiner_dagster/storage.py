"""Where dataset versions land, and the pointer that publishes one atomically.

Every materialization of a dataset asset writes a new *version folder*; a small
pointer file, written last by finalization, says which version readers see::

    <base>/<asset/key/path>/[<partition>/]
        _current.json            published pointer (written last, atomically)
        _versions/v-<id>.json    one record per version: state, format, engine run id
        v-<id>/                  the engine's output folder (table files, assets/, _refiner/)

``<id>`` is the Dagster run id shortened to 12 hex digits. Readers only follow
``_current.json`` (``mdr.read_parquet`` and the other readers too, given the folder:
refiner_core owns the pointer format, :mod:`refiner_core.io.versions`), so they never
see a half-written version. The pointer carries the history of its moves (which
version was published when: ``as_of=`` reads it) and each published version's record
says when it was published, by which Dagster run, and its ``parent`` (the version
published before it). After a publish, unpublished versions created before it are
deleted, and published ones beyond the version's :class:`~.retention.Retention`.

Example:
    >>> import tempfile
    >>> from refiner_dagster.storage import DatasetStorage
    >>> storage = DatasetStorage(tempfile.mkdtemp())
    >>> storage.partition_folder(["robotics", "episodes"], "2024-01-01").url.endswith(
    ...     "robotics/episodes/2024-01-01")
    True
    >>> storage.current(["robotics", "episodes"], "2024-01-01") is None
    True
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

import refiner_core as mdr
from refiner_core.io import (
    CURRENT_POINTER,
    VERSION_PREFIX,
    VERSIONS_DIR,
    map_in_order,
    moved_pointer,
    read_pointer,
)
from refiner_core.manifests import DatasetSummary

from .lerobot_format import DATASET_FORMATS, LEROBOT_FORMAT, DatasetFormat, lerobot_writer
from .retention import Retention
from .version_gc import delete_version_files, sweep_unrecorded

WRITING, WRITTEN, PUBLISHED = "writing", "written", "published"
# Keys only the pointer has: its move history and the last rollback.
_POINTER_ONLY = ("history", "rolled_back", "version", "url")
# Keys the pointer does not copy from the record: an append's (long) list of shared files.
_RECORD_ONLY = ("inherits",)
_FORMATS: dict[str, DatasetFormat] = {name: name for name in DATASET_FORMATS}

# Version records read at once when listing a dataset's versions.
_RECORD_READERS = 8

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_HEX = re.compile(r"[^0-9a-f]")


def short_run_id(dagster_run_id: str) -> str:
    """The first 12 hex digits of a Dagster run id (what version names and engine runs use).

    >>> short_run_id("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab")
    '6f1c2d3e4b5a'
    """
    digits = _HEX.sub("", str(dagster_run_id).lower())
    if len(digits) >= 12:
        return digits[:12]
    return hashlib.sha1(str(dagster_run_id).encode()).hexdigest()[:12]


def partition_dirname(partition_key: str) -> str:
    """A folder name for a partition key: the key itself when it is a plain name.

    Keys with other characters (``/``, ``:``, ``|``, spaces) or a leading ``_``/``.``
    have those characters replaced by ``_`` and a short hash of the key appended, so
    two different keys never share a folder.

    >>> partition_dirname("2024-01-01")
    '2024-01-01'
    >>> partition_dirname("2024-01-01-00:00")
    '2024-01-01-00_00-326a09d0'
    """
    key = str(partition_key)
    safe = _SAFE.sub("_", key)
    if safe == key and safe and not safe.startswith(("_", ".")):
        return safe
    digest = hashlib.sha1(key.encode()).hexdigest()[:8]
    stem = safe.lstrip("._")
    return f"{stem}-{digest}" if stem else f"p-{digest}"


@dataclass
class DatasetVersion:
    """One version folder of a dataset asset partition and what is known about it.

    Handed to finalization assets and checks (never media bytes): ``url`` is the
    engine output folder, ``record`` what the IO manager persisted when writing it.
    """

    storage: DatasetStorage
    asset_path: list[str]
    partition_key: str | None
    name: str
    record: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def folder(self) -> mdr.DataFolder:
        return self.storage.partition_folder(self.asset_path, self.partition_key)

    @property
    def url(self) -> str:
        return self.folder.url_of(self.name)

    @property
    def format(self) -> DatasetFormat:
        value = self.record.get("format", "parquet")
        if value not in _FORMATS:
            raise ValueError(
                f"{self.describe()} records format {value!r}, not one of {', '.join(DATASET_FORMATS)}; "
                "its record was not written by refiner: materialize the asset again"
            )
        return _FORMATS[value]

    @property
    def state(self) -> str:
        return self.record.get("state", WRITING)

    @property
    def engine_run_id(self) -> str | None:
        return self.record.get("engine_run_id")

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.storage.storage_options

    def writer(self, pipeline: mdr.Pipeline, assets: Any) -> mdr.PipelineSequence:
        """``pipeline`` writing this version's table with ``assets`` (a Lance version is
        always a new dataset; a LeRobot version is written by ``write_lerobot``)."""
        fmt = self.format
        if fmt == LEROBOT_FORMAT:
            return lerobot_writer(self, pipeline, assets)
        options = {}
        if fmt == "lance":  # an append adds its fragments to the clone of its parent
            options["mode"] = "append" if self.record.get("append_parent") else "create"
        against = tuple(self.record.get("dedupe_against") or ())
        if against and isinstance(assets, mdr.BlobAssetConfig):
            assets = dataclasses.replace(assets, dedupe_against=against)
        return pipeline.write(
            fmt,
            self.url,
            assets=assets,
            storage_options=self.storage_options or None,
            **options,
        )

    def output_folder(self) -> mdr.DataFolder:
        return mdr.DataFolder(self.url, self.storage.storage_options or None)

    def summary(self) -> DatasetSummary | None:
        """The engine's finalization summary of this version, read from storage."""
        try:
            return DatasetSummary.read(self.output_folder())
        except FileNotFoundError:
            return None

    def describe(self) -> str:
        where = f" partition {self.partition_key!r}" if self.partition_key is not None else ""
        return f"asset {'/'.join(self.asset_path)}{where} version {self.name} ({self.url})"


def one_version(loaded: Any, who: str) -> DatasetVersion:
    """The one version an IO manager load returned (a dict when partitioned); ``who``
    names the asset or check in the error when there are several."""
    if isinstance(loaded, dict):
        if len(loaded) != 1:
            raise ValueError(f"{who} runs on one partition at a time, got {len(loaded)}")
        (loaded,) = loaded.values()
    return loaded


class SupersededError(mdr.RefinerError, RuntimeError):
    """A version is refused because another one was published first: readers keep that one.

    ``winner_version`` / ``winner_run`` name the published version and the Dagster run
    that wrote it (``None`` when its record does not say).
    """

    def __init__(
        self, message: str, *, winner_version: str | None = None, winner_run: str | None = None
    ) -> None:
        super().__init__(message)
        self.winner_version = winner_version
        self.winner_run = winner_run


class DatasetStorage:
    """Dataset versions under one base folder or URL (local path, ``s3://``, any fsspec URL)."""

    def __init__(self, base_url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.base_url = base_url
        self.storage_options = dict(storage_options or {})
        self._root = mdr.DataFolder(base_url, self.storage_options or None)

    def __repr__(self) -> str:
        return f"DatasetStorage({self._root.url!r})"

    @property
    def url(self) -> str:
        return self._root.url

    def relative_folder(self, asset_path: Sequence[str], partition_key: str | None) -> str:
        parts = [str(p) for p in asset_path]
        if partition_key is not None:
            parts.append(partition_dirname(partition_key))
        return "/".join(parts)

    def partition_folder(
        self, asset_path: Sequence[str], partition_key: str | None
    ) -> mdr.DataFolder:
        """The folder holding every version of one asset (partition)."""
        relative = self.relative_folder(asset_path, partition_key)
        return mdr.DataFolder(self._root.url_of(relative), self.storage_options or None)

    # versions -----------------------------------------------------------------
    def versions(
        self, asset_path: Sequence[str], partition_key: str | None
    ) -> list[DatasetVersion]:
        """Every recorded version, oldest first."""
        folder = self.partition_folder(asset_path, partition_key)
        names = [
            base[: -len(".json")]
            for base in (relative.rsplit("/", 1)[-1] for relative in folder.find(VERSIONS_DIR))
            if base.startswith(VERSION_PREFIX) and base.endswith(".json")
        ]
        records = map_in_order(
            lambda name: json.loads(folder.read_bytes(f"{VERSIONS_DIR}/{name}.json")),
            names,
            max_workers=_RECORD_READERS,
        )
        found = [
            DatasetVersion(self, list(asset_path), partition_key, name, record)
            for name, record in zip(names, records, strict=True)
        ]
        return sorted(found, key=lambda v: (v.record.get("created_at", 0.0), v.name))

    def record(self, version: DatasetVersion, **changes: Any) -> None:
        """Update and persist ``version``'s record (atomic replace)."""
        version.record.update(changes)
        version.record["updated_at"] = time.time()
        # a version opened from the pointer carries the pointer's own fields: not its record's
        kept = {k: v for k, v in version.record.items() if k not in _POINTER_ONLY}
        data = json.dumps(kept, indent=1, sort_keys=True).encode()
        version.folder.write_bytes(f"{VERSIONS_DIR}/{version.name}.json", data)

    def begin(
        self,
        asset_path: Sequence[str],
        partition_key: str | None,
        name: str,
        record: dict[str, Any],
        *,
        resume: bool = False,
    ) -> DatasetVersion:
        """Start writing version ``name``: clear what an earlier try left, record it.

        With ``resume``, a version still being written by the same Dagster run (a retried
        or re-executed step) keeps its files, so committed shards are not written again.
        The record keeps the version published at the start (``base_version``): the new
        version is published only while readers still see that one (see
        :mod:`refiner_dagster.one_publisher`).
        """
        current = self.current(asset_path, partition_key)
        if current is not None and current.name == name:
            raise RuntimeError(
                f"{current.describe()} is already published; a run writes a version only once. "
                "Launch a new run to materialize the asset again"
            )
        earlier = self._record_of(asset_path, partition_key, name) if resume else None
        if earlier is not None and earlier.get("dagster_run_id") == record.get("dagster_run_id"):
            version = DatasetVersion(self, list(asset_path), partition_key, name, earlier)
            self.record(version, **record, state=WRITING)
            return version
        version = DatasetVersion(self, list(asset_path), partition_key, name, {})
        version.folder.rm(name, recursive=True)
        # what readers saw when this version began: it is published only over that one
        base = current.name if current is not None else None
        self.record(version, **record, state=WRITING, created_at=time.time(), base_version=base)
        return version

    def _record_of(
        self, asset_path: Sequence[str], partition_key: str | None, name: str
    ) -> dict[str, Any] | None:
        folder = self.partition_folder(asset_path, partition_key)
        try:
            return json.loads(folder.read_bytes(f"{VERSIONS_DIR}/{name}.json"))
        except FileNotFoundError:
            return None

    def version(
        self, asset_path: Sequence[str], partition_key: str | None, name: str
    ) -> DatasetVersion:
        """Version ``name`` with its persisted record (a step handed its name re-opens it)."""
        record = self._record_of(asset_path, partition_key, name)
        if record is None:
            raise FileNotFoundError(
                f"asset {'/'.join(asset_path)} has no version {name} under {self.url}; "
                "its plan step must run first (re-execute the run from its first step)"
            )
        return DatasetVersion(self, list(asset_path), partition_key, name, record)

    def discard(self, version: DatasetVersion) -> None:
        """Delete a version folder and its record (never the published one)."""
        current = self.current(version.asset_path, version.partition_key)
        if current is not None and current.name == version.name:
            return
        self._delete(version)

    def _delete(self, version: DatasetVersion, keep: set[str] | None = None) -> None:
        """Delete ``version``'s files but those another version inherits (``keep``, by
        default read from every other version's record), then its record."""
        if keep is None:
            others = self.versions(version.asset_path, version.partition_key)
            keep = shared_files(v for v in others if v.name != version.name)
        delete_version_files(version.folder, version.name, keep)
        version.folder.rm(f"{VERSIONS_DIR}/{version.name}.json")

    def pending(
        self, asset_path: Sequence[str], partition_key: str | None, prefer: str | None = None
    ) -> DatasetVersion | None:
        """The version to finalize: ``prefer`` when written, else the newest written one."""
        written = [v for v in self.versions(asset_path, partition_key) if v.state == WRITTEN]
        for v in written:
            if v.name == prefer:
                return v
        return written[-1] if written else None

    # publishing ---------------------------------------------------------------
    def current(
        self, asset_path: Sequence[str], partition_key: str | None
    ) -> DatasetVersion | None:
        """The published version readers see, or ``None``."""
        folder = self.partition_folder(asset_path, partition_key)
        pointer = read_pointer(folder.fs, folder.path)
        if pointer is None:
            return None
        return DatasetVersion(self, list(asset_path), partition_key, pointer["version"], pointer)

    def publish(
        self,
        version: DatasetVersion,
        *,
        is_live: Callable[[str], bool] | None = None,
        published_by: str | None = None,
        **extra: Any,
    ) -> DatasetVersion:
        """Point readers at ``version`` (one atomic write), then delete older versions
        beyond its retention (see :meth:`cleanup` for ``is_live``).

        Its record gains ``published_at``, ``parent`` (the version published before it)
        and ``published_by`` (the Dagster run that published it, when given); the pointer
        appends the move to its history.

        Refuses (:class:`SupersededError`) when a newer version is already published.
        The reducer checks this too, but a run whose audit took longer than a newer
        run's whole finalization must not move readers back, so it is checked again
        right before the pointer is written.
        """
        previous = self.pointer(version.asset_path, version.partition_key)
        return self.publish_over(
            version, previous, is_live=is_live, published_by=published_by, **extra
        )

    def publish_over(
        self,
        version: DatasetVersion,
        previous: dict[str, Any] | None,
        *,
        is_live: Callable[[str], bool] | None = None,
        published_by: str | None = None,
        **extra: Any,
    ) -> DatasetVersion:
        """:meth:`publish` over ``previous``, the pointer as the caller read it while no
        other publisher could move it (:func:`~refiner_dagster.one_publisher.publishing`)."""
        self._refuse_superseded_by(version, self.pointed(version, previous))
        parent = previous["version"] if previous is not None else None
        if parent == version.name:  # finalized again: keep the parent it had
            parent = version.record.get("parent")
        now = time.time()
        self.record(
            version,
            state=PUBLISHED,
            published_at=now,
            parent=parent,
            published_by=published_by or version.record.get("dagster_run_id"),
            **extra,
        )
        run = version.record.get("published_by")
        pointer = self._move_pointer(version, previous, now, action="publish", run=run)
        published = DatasetVersion(
            self, version.asset_path, version.partition_key, version.name, pointer
        )
        self.cleanup(published, is_live=is_live)
        return published

    def pointer(self, asset_path: Sequence[str], partition_key: str | None) -> dict | None:
        """The pointer readers follow, as stored (``None`` when nothing is published)."""
        folder = self.partition_folder(asset_path, partition_key)
        return read_pointer(folder.fs, folder.path)

    def _move_pointer(
        self,
        version: DatasetVersion,
        previous: dict[str, Any] | None,
        at: float,
        *,
        action: str,
        **details: Any,
    ) -> dict[str, Any]:
        """Write the pointer that moves readers to ``version`` (one atomic write)."""
        fields = {k: v for k, v in version.record.items() if k not in _POINTER_ONLY + _RECORD_ONLY}
        fields["url"] = version.url
        pointer = moved_pointer(previous, fields, version.name, at=at, action=action, **details)
        version.folder.write_bytes(CURRENT_POINTER, json.dumps(pointer, indent=1).encode())
        return pointer

    def refuse_superseded(self, version: DatasetVersion, current: DatasetVersion | None) -> None:
        """Raise :class:`SupersededError` when ``current`` (the published version, as just
        read) is newer than ``version``."""
        self._refuse_superseded_by(version, current)

    def pointed(self, version: DatasetVersion, pointer: dict | None) -> DatasetVersion | None:
        """The version ``pointer`` (of ``version``'s dataset) publishes."""
        if pointer is None:
            return None
        return DatasetVersion(
            self, list(version.asset_path), version.partition_key, pointer["version"], pointer
        )

    def _refuse_superseded_by(
        self, version: DatasetVersion, current: DatasetVersion | None
    ) -> None:
        if (
            current is not None
            and current.name != version.name
            and current.record.get("created_at", 0.0) > version.record.get("created_at", 0.0)
        ):
            raise SupersededError(
                f"{version.describe()} was superseded: the newer version {current.name} is "
                "already published, so this one is not published. Materialize the dataset "
                "asset again to replace it",
                winner_version=current.name,
                winner_run=current.record.get("dagster_run_id"),
            )

    def cleanup(
        self, published: DatasetVersion, *, is_live: Callable[[str], bool] | None = None
    ) -> list[str]:
        """Delete unpublished versions created before ``published`` (newer ones may still
        be running) and previously published versions beyond its retention, oldest first.

        A version still in state ``writing`` is deleted only when ``is_live`` says the
        Dagster run writing it has finished (it crashed or was cancelled); without
        ``is_live`` such versions are kept, since another run may still be writing them.
        A ``written`` version is kept while ``is_live`` says its run is still live (its
        finalization may be running), and so is a ``published`` one whose run is known
        to be live (having published it, its finalization may still be reading it).
        Published versions within the retention (:class:`~.retention.Retention`: the
        newest ``keep_versions``, and those readers saw within ``keep_for``) are kept.
        """
        created = published.record.get("created_at", 0.0)
        listed = self.versions(published.asset_path, published.partition_key)
        others = [v for v in listed if v.name != published.name]
        earlier = {
            v.name: v.record.get("published_at", 0.0) for v in others if v.state == PUBLISHED
        }
        expired = Retention.from_record(published.record).expired(
            published.record, earlier, time.time()
        )
        by_name = {v.name: v for v in others}
        doomed = []
        for v in others:
            if v.state == PUBLISHED or v.record.get("created_at", 0.0) > created:
                continue  # published ones go by retention; newer ones may still be running
            if v.state == WRITING and _maybe_live(v, is_live):
                continue  # its run may still be writing it
            if v.state == WRITTEN and is_live is not None and _maybe_live(v, is_live):
                continue  # its live run may be finalizing it
            doomed.append(v)
        doomed += [by_name[n] for n in expired if not _known_live(by_name[n], is_live)]
        gone = {v.name for v in doomed}
        remaining = [v for v in others if v.name not in gone]
        # its record as just listed (the pointer ``published`` carries drops ``inherits``)
        own = [v for v in listed if v.name == published.name]
        remaining += own or [
            self.version(published.asset_path, published.partition_key, published.name)
        ]
        keep = shared_files(remaining)
        removed = []
        for v in doomed:
            self._delete(v, keep)
            removed.append(v.name)
        sweep_unrecorded(published.folder, [v.name for v in remaining], keep)
        return removed


def shared_files(versions: Iterable[DatasetVersion]) -> set[str]:
    """Every file (relative to the dataset folder) one of ``versions`` inherits from the
    versions before it (see :mod:`refiner_dagster.append`)."""
    used: set[str] = set()
    for v in versions:
        used.update(v.record.get("inherits") or ())
    return used


def _maybe_live(version: DatasetVersion, is_live: Callable[[str], bool] | None) -> bool:
    run_id = version.record.get("dagster_run_id")
    if is_live is None or not run_id:
        return True
    return is_live(str(run_id))


def _known_live(version: DatasetVersion, is_live: Callable[[str], bool] | None) -> bool:
    run_id = version.record.get("dagster_run_id")
    return is_live is not None and bool(run_id) and is_live(str(run_id))


def _field(resource: Any, name: str) -> Any:
    """A resource field's value; an unresolved ``EnvVar`` is read from the environment."""
    value = getattr(resource, name, None)
    if isinstance(value, dg.EnvVar):
        value = value.get_value()
    return value


def s3_storage_options(s3: Any) -> dict[str, Any]:
    """s3fs storage options from a dagster-aws ``S3Resource`` (credentials, region, endpoint).

    Fields given as ``dg.EnvVar("NAME")`` are read from the environment, also outside a
    run (where the resource still holds the ``EnvVar`` itself).
    """
    options: dict[str, Any] = {}
    client_kwargs: dict[str, Any] = {}
    config_kwargs: dict[str, Any] = {}
    for field_name, option in (
        ("aws_access_key_id", "key"),
        ("aws_secret_access_key", "secret"),
        ("aws_session_token", "token"),
        ("profile_name", "profile"),
        ("endpoint_url", "endpoint_url"),
    ):
        value = _field(s3, field_name)
        if value:
            options[option] = str(value)
    if _field(s3, "use_unsigned_session"):
        options["anon"] = True
    if _field(s3, "use_ssl") is False:
        options["use_ssl"] = False
    region = _field(s3, "region_name")
    if region:
        client_kwargs["region_name"] = str(region)
    verify = _field(s3, "verify")
    if verify is not None:
        client_kwargs["verify"] = verify
    max_attempts = _field(s3, "max_attempts")
    if max_attempts:
        config_kwargs["retries"] = {"max_attempts": int(max_attempts)}
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    if config_kwargs:
        options["config_kwargs"] = config_kwargs
    return options

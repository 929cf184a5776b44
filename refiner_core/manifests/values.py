"""The typed values runs persist: AttemptManifest and DatasetSummary, and their versioned JSON.

``format_version`` is written into every file; files written before it existed read
as version 1, and a version newer than this release knows fails naming the file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..vocabulary import AssetForm, MissingPolicy
from ._attempts import SUMMARY_PATH, manifest_path
from .audit import ReferenceAudit, read_audit

# The JSON layout of manifests and summaries. 1: before the field existed (read as is).
FORMAT_VERSION = 2


def human_bytes(n: float) -> str:
    """A byte counter for people: ``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _format_version(data: Mapping[str, Any], where: str) -> int:
    version = data.get("format_version", 1)
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not 1 <= version <= FORMAT_VERSION
    ):
        raise ValueError(
            f"{where} has format_version {version!r}, which this refiner_core does not know "
            f"(it reads versions 1 to {FORMAT_VERSION}); upgrade refiner_core to read it"
        )
    return version


# What to do about an unreadable manifest or summary, said in every error naming one.
_MANIFEST_FIX = "delete it to treat that attempt as failed"
_SUMMARY_FIX = "finalize the output again to rewrite it"


def _read_json(folder: Any, relative: str, *, what: str, fix: str) -> Any:
    """The JSON document at ``relative`` under ``folder``; ``ValueError`` naming it as
    ``what`` and its URL, with ``fix``, when it is not valid JSON."""
    try:
        return json.loads(folder.read_bytes(relative))
    except ValueError as exc:
        raise ValueError(
            f"{what} {folder.url_of(relative)} is not valid JSON ({exc}); {fix}"
        ) from exc


def _int_counters(values: Mapping[str, Any]) -> dict[str, int]:
    return {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}


@dataclass(frozen=True)
class AttemptManifest:
    """What one shard attempt wrote: its files, asset folders, sink extras and counters.

    ``files`` and ``asset_dirs`` are relative to the output folder; ``extra`` holds
    what a sink needs at commit (Lance: fragments and schema). Persisted at
    ``<output>/_refiner/attempts/<shard>__<attempt>.json``.

    Example:
        >>> m = AttemptManifest(run_id="r1", shard_id="00002", attempt_id="0123456789ab",
        ...                     started_at=1.0, completed_at=2.5)
        >>> m.key, m.path
        (('00002', '0123456789ab'), '_refiner/attempts/00002__0123456789ab.json')
    """

    run_id: str
    shard_id: str
    attempt_id: str
    started_at: float
    completed_at: float
    files: tuple[str, ...] = ()
    asset_dirs: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    steps: tuple[dict[str, Any], ...] = ()
    reference_audit: ReferenceAudit | None = None
    """The attempt's check of the references it wrote (``None``: it wrote none it checks)."""

    @property
    def key(self) -> tuple[str, str]:
        """``(shard_id, attempt_id)``."""
        return (self.shard_id, self.attempt_id)

    @property
    def path(self) -> str:
        """Where the manifest lives, relative to the output folder."""
        return manifest_path(self.shard_id, self.attempt_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "run_id": self.run_id,
            "shard_id": self.shard_id,
            "attempt_id": self.attempt_id,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
            "files": list(self.files),
            "asset_dirs": list(self.asset_dirs),
            "extra": self.extra,
            "counters": self.counters,
            "steps": list(self.steps),
            **_audit_json(self.reference_audit),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str) -> AttemptManifest:
        """Read the JSON form (any known ``format_version``); ``where`` names the file."""
        _format_version(data, where)
        try:
            return cls(
                run_id=str(data["run_id"]),
                shard_id=str(data["shard_id"]),
                attempt_id=str(data["attempt_id"]),
                started_at=float(data["started_at"]),
                completed_at=float(data["completed_at"]),
                files=tuple(data.get("files", ())),
                asset_dirs=tuple(data.get("asset_dirs", ())),
                extra=dict(data.get("extra") or {}),
                counters=_int_counters(data.get("counters") or {}),
                steps=tuple(data.get("steps", ())),
                reference_audit=read_audit(data, where=where),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"attempt manifest {where} is malformed ({type(exc).__name__}: {exc}); "
                f"{_MANIFEST_FIX}"
            ) from exc


@dataclass(frozen=True)
class AttemptResult:
    """What a sink's attempt writer wrote, as ``AttemptWriter.close()`` returns it.

    ``files`` and ``asset_dirs`` are relative to the output folder, ``extra`` is what
    the sink needs at commit. :meth:`manifest` makes it the attempt's manifest.

    Example:
        >>> result = AttemptResult(files=("a.parquet",), counters={"rows_written": 2})
        >>> m = result.manifest(run_id="r1", shard_id="00000", attempt_id="0123456789ab",
        ...                     started_at=1.0, rows_read=2)
        >>> m.files, m.counters
        (('a.parquet',), {'rows_read': 2, 'rows_written': 2})
    """

    files: tuple[str, ...] = ()
    asset_dirs: tuple[str, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    reference_audit: ReferenceAudit | None = None

    def manifest(
        self,
        *,
        run_id: str,
        shard_id: str,
        attempt_id: str,
        started_at: float,
        rows_read: int,
        steps: tuple[dict[str, Any], ...] = (),
    ) -> AttemptManifest:
        """The manifest of the attempt that wrote this, completed now."""
        return AttemptManifest(
            run_id=run_id,
            shard_id=shard_id,
            attempt_id=attempt_id,
            started_at=started_at,
            completed_at=time.time(),
            files=self.files,
            asset_dirs=self.asset_dirs,
            extra=self.extra,
            counters={"rows_read": rows_read, **self.counters},
            steps=steps,
            reference_audit=self.reference_audit,
        )


def _audit_json(audit: ReferenceAudit | None) -> dict[str, Any]:
    """The ``reference_audit`` entry of a JSON form (none without an audit)."""
    return {} if audit is None else {"reference_audit": audit.to_json()}


def _optional_names(value: Any) -> tuple[str, ...] | None:
    """A list of relative file names of a JSON form (``None`` stays ``None``)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of file names, got {value!r}")
    return tuple(value)


def manifest_bytes(manifest: AttemptManifest) -> bytes:
    """The bytes :func:`write_manifest` stores for ``manifest``."""
    return json.dumps(manifest.to_json(), indent=1).encode()


def write_manifest(folder: Any, manifest: AttemptManifest) -> None:
    folder.write_bytes(manifest.path, manifest_bytes(manifest))


def read_manifest(folder: Any, relative: str) -> AttemptManifest:
    """The attempt manifest at ``relative`` (an unreadable one raises, naming the file)."""
    data = _read_json(folder, relative, what="attempt manifest", fix=_MANIFEST_FIX)
    return AttemptManifest.from_json(data, where=folder.url_of(relative))


# Summary fields that are not counters, in the order the JSON form lists them.
_SUMMARY_FIELDS = (
    "output",
    "format",
    "run_id",
    "shards",
    "rejected_attempts_removed",
    "files_removed",
    "files",
    "asset_dirs",
    "asset_subdir",
    "asset_mode",
    "missing_policy",
    "commit",
    "open_uploads",
    "finalized_at",
    "elapsed_s",
)


# ``asset_mode`` as the first summaries wrote it: the config's class name.
_OLD_ASSET_MODES: dict[str, AssetForm] = {"FileAssetConfig": "files", "BlobAssetConfig": "blobs"}


@dataclass(frozen=True)
class DatasetSummary:
    """What a finalization kept and removed, with every counter summed over the kept attempts.

    Persisted at ``<output>/_refiner/summary.json`` (counters at the top level of the
    JSON form) and returned as ``launch_local(...).summary``. Read it by attribute;
    ``counters`` holds every summed counter (``rows_written``, ``assets_written``, ...),
    ``totals`` those and the counts only finalization makes, in one mapping.

    Example:
        >>> s = DatasetSummary(output="/data/out", format="parquet", run_id="r1", shards=2,
        ...                    counters={"rows_written": 10})
        >>> s.rows_written, s.counters["rows_written"], s.shards
        (10, 10, 2)
        >>> DatasetSummary.from_json(s.to_json(), where="example") == s
        True
    """

    output: str
    format: str
    run_id: str
    shards: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    rejected_attempts_removed: int = 0
    files_removed: int = 0
    files: tuple[str, ...] = ()
    asset_dirs: tuple[str, ...] = ()
    asset_subdir: str | None = None
    asset_mode: AssetForm | None = None
    missing_policy: MissingPolicy | None = None
    commit: dict[str, Any] = field(default_factory=dict)
    open_uploads: tuple[dict[str, str], ...] = ()
    """Multipart uploads whose abort failed even when finalization retried it, each with
    the call that aborts it; empty when none was left open."""
    finalized_at: float = 0.0
    elapsed_s: float = 0.0
    reference_audit: ReferenceAudit | None = None
    """The committed attempts' reference audits summed (``attempts`` of them; ``None``
    when no committed attempt recorded one)."""
    unaudited_files: tuple[str, ...] | None = None
    """With a ``reference_audit``: the files of the committed attempts that recorded no
    audit of their own (an audit at publication reads these in full and only samples the
    rest); ``None`` when not recorded."""

    @property
    def rows_written(self) -> int:
        return self.counters.get("rows_written", 0)

    @property
    def totals(self) -> dict[str, int]:
        """Every counter, with ``shards``, ``rejected_attempts_removed`` and ``files_removed``."""
        return {
            **self.counters,
            "shards": self.shards,
            "rejected_attempts_removed": self.rejected_attempts_removed,
            "files_removed": self.files_removed,
        }

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format_version": FORMAT_VERSION}
        for name in _SUMMARY_FIELDS[:4]:
            data[name] = getattr(self, name)
        data.update(self.counters)
        for name in _SUMMARY_FIELDS[4:]:
            value = getattr(self, name)
            data[name] = list(value) if isinstance(value, tuple) else value
        data.update(_audit_json(self.reference_audit))
        if self.unaudited_files is not None:
            data["unaudited_files"] = list(self.unaudited_files)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str) -> DatasetSummary:
        """Read the JSON form (any known ``format_version``, including the first
        summaries, which named ``asset_mode`` by the config's class); ``where`` names
        the file."""
        _format_version(data, where)
        known = {f.name for f in fields(cls)}
        counters = _int_counters(
            {k: v for k, v in data.items() if k not in known and k != "format_version"}
        )
        try:
            return cls(
                output=str(data["output"]),
                format=str(data["format"]),
                run_id=str(data["run_id"]),
                shards=int(data.get("shards", 0)),
                counters=counters,
                rejected_attempts_removed=int(data.get("rejected_attempts_removed", 0)),
                files_removed=int(data.get("files_removed", 0)),
                files=tuple(data.get("files", ())),
                asset_dirs=tuple(data.get("asset_dirs", ())),
                asset_subdir=data.get("asset_subdir"),
                asset_mode=_OLD_ASSET_MODES.get(
                    data.get("asset_mode") or "", data.get("asset_mode")
                ),
                missing_policy=data.get("missing_policy"),
                commit=dict(data.get("commit") or {}),
                open_uploads=tuple(dict(u) for u in data.get("open_uploads", ())),
                finalized_at=float(data.get("finalized_at", 0.0)),
                elapsed_s=float(data.get("elapsed_s", 0.0)),
                reference_audit=read_audit(data, where=where),
                unaudited_files=_optional_names(data.get("unaudited_files")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"dataset summary {where} is malformed ({type(exc).__name__}: {exc}); "
                f"{_SUMMARY_FIX}"
            ) from exc

    def write(self, folder: Any) -> None:
        folder.write_bytes(SUMMARY_PATH, json.dumps(self.to_json(), indent=1).encode())

    @classmethod
    def read(cls, folder: Any) -> DatasetSummary:
        """The summary persisted under ``folder`` (``FileNotFoundError`` when not finalized)."""
        data = _read_json(folder, SUMMARY_PATH, what="dataset summary", fix=_SUMMARY_FIX)
        return cls.from_json(data, where=folder.url_of(SUMMARY_PATH))

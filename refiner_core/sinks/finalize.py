"""The finalization stage: keep one attempt per shard, delete the rest, commit, summarize."""

from __future__ import annotations

import dataclasses
import posixpath
import time
from typing import Any

from ..io.datafile import completed_name
from ..io.open_uploads import retry_open_uploads
from ..io.ownership import Lease, OutputOwnership
from ..manifests import (
    MANIFEST_DIR,
    AttemptManifest,
    DatasetSummary,
    PersistedManifests,
    choose_committed,
    committed_counters,
    parse_attempt_key,
    read_persisted,
)
from .empty_result import write_empty_result
from .fence import Fence


def _completed_relative(relative: str) -> str | None:
    """The file a leftover temporary file of an interrupted write would have become."""
    directory, base = posixpath.split(relative)
    name = completed_name(base)
    if name is None:
        return None
    return posixpath.join(directory, name) if directory else name


def remove_attempt(folder: Any, manifest: AttemptManifest) -> int:
    """Delete an attempt's files, asset folders and manifest; returns how many files
    and folders it named."""
    named = [*manifest.files, *manifest.asset_dirs]
    for relative in named:
        folder.rm(relative, recursive=True)
    folder.rm(manifest.path)
    return len(named)


def _only_accepted(
    manifests: list[AttemptManifest], accepted: dict[str, str] | None, output: str
) -> list[AttemptManifest]:
    """The manifests of the accepted attempts (all of them when nothing is given)."""
    if accepted is None:
        return manifests
    kept = [m for m in manifests if accepted.get(m.shard_id) == m.attempt_id]
    found = {m.shard_id for m in kept}
    missing = sorted(set(accepted) - found)
    if missing:
        raise FileNotFoundError(
            f"{output}: the accepted attempt of shard {missing[0]} ({accepted[missing[0]]}) has "
            f"no manifest under {output}/_refiner/attempts (removed by hand?); "
            f"{len(missing)} shard(s) are affected. Launch again with fresh=True to rewrite them"
        )
    return kept


def _no_check() -> None:
    pass


class FinalizeStage:
    """Reducer over persisted manifests; runs once after the write stage, and is idempotent.

    It keeps exactly one attempt per shard of the run, deletes data files, asset
    folders and manifests that provably belong to other attempts (including crashed
    attempts that never wrote a manifest), lets the sink commit (Lance), and writes
    ``<output>/_refiner/summary.json``. With a lease, ownership is checked before each
    destructive step (:mod:`refiner_core.sinks.fence`): a run that lost the folder
    stops with :class:`~refiner_core.io.ownership.OwnershipLost` and deletes nothing.
    """

    kind = "finalize"

    def __init__(self, sink: Any) -> None:
        self.sink = sink

    @property
    def name(self) -> str:
        return f"finalize {self.sink.describe()}"

    def run(
        self,
        run_id: str,
        *,
        lease: Lease | None = None,
        accepted: dict[str, str] | None = None,
        persisted: PersistedManifests | None = None,
    ) -> DatasetSummary:
        """Finalize ``run_id``'s attempts; returns the summary it wrote.

        ``lease`` is the launcher's ownership of the output folder; without one this
        takes the folder's ownership for its own duration (another live run owning
        it is an error). ``accepted`` maps shard ids to the attempt the launcher
        accepted for them: only those are kept, other attempts of the run (say of
        workers of a launcher that died) are rejected. ``persisted`` is the output's
        manifest folder when the caller has already read it (each manifest is read once,
        see :func:`~refiner_core.manifests.read_persisted`).
        """
        if lease is not None or not self.sink.exclusive_owner:
            return self._finalize(run_id, lease, accepted, persisted)
        with OutputOwnership(self.sink.folder, run_id=run_id) as ownership:
            return self._finalize(run_id, ownership.lease(), accepted, persisted)

    def _finalize(
        self,
        run_id: str,
        lease: Lease | None,
        accepted: dict[str, str] | None,
        persisted: PersistedManifests | None,
    ) -> DatasetSummary:
        started = time.time()
        folder = self.sink.folder
        persisted = persisted if persisted is not None else read_persisted(folder)
        manifests = self.select_manifests(list(persisted.manifests), run_id)
        committed = choose_committed(_only_accepted(manifests, accepted, folder.url), run_id)
        keep = {m.key for m in committed.values()}
        fence = Fence(folder, lease)
        fence.check()
        commit_info = self.sink.commit(sorted(committed.values(), key=lambda m: m.shard_id), run_id)
        # a sink that names its files only when it commits them (LeRobot) lists them here
        commit_files = list(commit_info.pop("files", ()))

        fence.check()
        empty_files = write_empty_result(self.sink, committed)
        fence.check()
        uploads = retry_open_uploads(folder)
        totals = committed_counters(committed.values())
        totals["files_written"] = totals.get("files_written", 0) + len(empty_files)
        totals["uploads_aborted"] = uploads["uploads_aborted"]
        summary = DatasetSummary(
            output=folder.url,
            format=self.sink.format,
            run_id=run_id,
            shards=len(committed),
            counters=totals,
            files=tuple(
                sorted(
                    [*(f for m in committed.values() for f in m.files), *empty_files, *commit_files]
                )
            ),
            asset_dirs=tuple(sorted(d for m in committed.values() for d in m.asset_dirs)),
            asset_subdir=self.sink.assets.subdir if self.sink.assets else None,
            asset_mode=self.sink.assets.form if self.sink.assets else None,
            missing_policy=self.sink.assets.missing_policy if self.sink.assets else None,
            commit=commit_info,
            open_uploads=tuple(uploads["open_uploads"]),
            finalized_at=time.time(),
        )
        # Readers follow the summary: it names only kept files before anything that an
        # earlier summary listed is deleted, so it never lists a file that is gone.
        fence.write_summary(summary)

        rejected: set[tuple[str, str]] = set()
        files_removed = 0
        for m in manifests:
            if m.key not in keep:
                rejected.add(m.key)
                fence.check()  # each attempt's files are one deletion batch
                files_removed += remove_attempt(folder, m)
        fence.check()
        files_removed += self._remove_orphans(keep, rejected, run_id, fence)
        fence.check()
        files_removed += self._remove_manifest_temps(persisted.listing.temporaries)
        summary = dataclasses.replace(
            summary,
            rejected_attempts_removed=len(rejected),
            files_removed=files_removed,
            elapsed_s=round(time.time() - started, 3),
        )
        fence.write_summary(summary)
        return summary

    def _remove_manifest_temps(self, temporaries: tuple[str, ...]) -> int:
        """Delete manifests an attempt died while writing (their temporary files)."""
        for name in temporaries:
            self.sink.folder.rm(f"{MANIFEST_DIR}/{name}")
        return len(temporaries)

    def select_manifests(
        self, manifests: list[AttemptManifest], run_id: str
    ) -> list[AttemptManifest]:
        """The manifests this finalization may keep or delete (all of them for plain files)."""
        return manifests

    def _remove_orphans(
        self,
        keep: set[tuple[str, str]],
        rejected: set[tuple[str, str]],
        run_id: str,
        fence: Fence | None = None,
    ) -> int:
        """Delete files and asset folders named for attempts that are not kept (the
        ``fence`` checked before each)."""
        check = fence.check if fence is not None else _no_check
        folder = self.sink.folder
        template = self.sink.template
        removed = 0
        for relative in self._candidate_files(template):
            parsed = template.parse(relative)
            if parsed is None and (completed := _completed_relative(relative)) is not None:
                parsed = template.parse(completed)
            if parsed and parsed not in keep:
                check()
                folder.rm(relative)
                rejected.add(parsed)
                removed += 1
        if self.sink.assets is not None:
            subdir = self.sink.assets.subdir
            for name in folder.listdir(subdir):
                key = parse_attempt_key(name)
                if key is not None and key not in keep:
                    check()
                    folder.rm(f"{subdir}/{name}", recursive=True)
                    rejected.add(key)
                    removed += 1
        return removed

    def _candidate_files(self, template: Any) -> list[str]:
        """Files that could carry the template's names: one listing when its folder is
        fixed, else every file below the fixed part of its folder (bookkeeping and
        asset folders left out)."""
        folder = self.sink.folder
        directory = posixpath.dirname(template.template)
        if "{" not in directory:
            return [posixpath.join(directory, n) for n in folder.listdir(directory)]
        fixed = posixpath.dirname(directory[: directory.index("{")])
        skip = ("_refiner/", *((f"{self.sink.assets.subdir}/",) if self.sink.assets else ()))
        return [r for r in folder.find(fixed) if not r.startswith(skip)]

"""The finalization stage: keep one attempt per shard, delete the rest, commit, summarize."""

from __future__ import annotations

import posixpath
import time
from typing import Any

from ..io.datafile import completed_name
from ..io.open_uploads import retry_open_uploads
from ..manifests import (
    AttemptManifest,
    DatasetSummary,
    choose_committed,
    committed_counters,
    parse_attempt_key,
    read_manifests,
)
from .empty_result import write_empty_result


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


class FinalizeStage:
    """Reducer over persisted manifests; runs once after the write stage, and is idempotent.

    It keeps exactly one attempt per shard of the run, deletes data files, asset
    folders and manifests that provably belong to other attempts (including crashed
    attempts that never wrote a manifest), lets the sink commit (Lance), and writes
    ``<output>/_refiner/summary.json``.
    """

    kind = "finalize"

    def __init__(self, sink: Any) -> None:
        self.sink = sink

    @property
    def name(self) -> str:
        return f"finalize {self.sink.describe()}"

    def run(self, run_id: str) -> DatasetSummary:
        started = time.time()
        folder = self.sink.folder
        manifests = self.select_manifests(read_manifests(folder), run_id)
        committed = choose_committed(manifests, run_id)
        keep = {m.key for m in committed.values()}
        commit_info = self.sink.commit(sorted(committed.values(), key=lambda m: m.shard_id), run_id)

        rejected: set[tuple[str, str]] = set()
        files_removed = 0
        for m in manifests:
            key = m.key
            if key not in keep:
                rejected.add(key)
                files_removed += remove_attempt(folder, m)
        files_removed += self._remove_orphans(keep, rejected, run_id)

        empty_files = write_empty_result(self.sink, committed)
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
            rejected_attempts_removed=len(rejected),
            files_removed=files_removed,
            files=tuple(sorted([*(f for m in committed.values() for f in m.files), *empty_files])),
            asset_dirs=tuple(sorted(d for m in committed.values() for d in m.asset_dirs)),
            asset_subdir=self.sink.assets.subdir if self.sink.assets else None,
            asset_mode=self.sink.assets.form if self.sink.assets else None,
            missing_policy=self.sink.assets.missing_policy if self.sink.assets else None,
            commit=commit_info,
            open_uploads=tuple(uploads["open_uploads"]),
            finalized_at=time.time(),
            elapsed_s=round(time.time() - started, 3),
        )
        summary.write(folder)
        return summary

    def select_manifests(
        self, manifests: list[AttemptManifest], run_id: str
    ) -> list[AttemptManifest]:
        """The manifests this finalization may keep or delete (all of them for plain files)."""
        return manifests

    def _remove_orphans(
        self, keep: set[tuple[str, str]], rejected: set[tuple[str, str]], run_id: str
    ) -> int:
        """Delete files and asset folders named for attempts that are not kept."""
        folder = self.sink.folder
        template = self.sink.template
        removed = 0
        for relative in self._candidate_files(template):
            parsed = template.parse(relative)
            if parsed is None and (completed := _completed_relative(relative)) is not None:
                parsed = template.parse(completed)
            if parsed and parsed not in keep:
                folder.rm(relative)
                rejected.add(parsed)
                removed += 1
        if self.sink.assets is not None:
            subdir = self.sink.assets.subdir
            for name in folder.listdir(subdir):
                key = parse_attempt_key(name)
                if key is not None and key not in keep:
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

"""The finalization stage: keep one attempt per shard, delete the rest, commit, summarize."""

from __future__ import annotations

import dataclasses
import time

from ..io.datafile import DataFolder
from ..io.open_uploads import retry_open_uploads
from ..io.ownership import Lease, OutputOwnership
from ..manifests import AttemptManifest, DatasetSummary, PersistedManifests, read_persisted
from ..manifests._attempts import MANIFEST_DIR, choose_committed, committed_counters
from ..manifests.audit import ReferenceAudit
from .fence import Fence
from .protocol import Leftovers, Sink


def remove_attempt(folder: DataFolder, manifest: AttemptManifest) -> int:
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


def _combined_audit(committed: dict[str, AttemptManifest]) -> ReferenceAudit | None:
    """The kept attempts' reference audits summed, in shard order (``None``: none has one)."""
    audits = [
        m.reference_audit for _, m in sorted(committed.items()) if m.reference_audit is not None
    ]
    return ReferenceAudit.combine(audits) if audits else None


def _unaudited_files(committed: dict[str, AttemptManifest]) -> tuple[str, ...] | None:
    """The files of kept attempts without a reference audit, when any kept attempt has one
    (``None``: no attempt audited itself, so there is nothing to tell apart)."""
    if all(m.reference_audit is None for m in committed.values()):
        return None
    return tuple(
        sorted(f for m in committed.values() if m.reference_audit is None for f in m.files)
    )


class FinalizeStage:
    """The reduce stage a writer's sequence ends with; :func:`refiner_core.sinks.finalize_output`
    runs it for an output folder without a pipeline.

    It keeps exactly one attempt per shard of the run, deletes data files, asset
    folders and manifests that provably belong to other attempts (including crashed
    attempts that never wrote a manifest), lets the sink commit (Lance), and writes
    ``<output>/_refiner/summary.json``. With a lease, ownership is checked before each
    destructive step (:mod:`refiner_core.sinks.fence`): a run that lost the folder
    stops with :class:`~refiner_core.io.ownership.OwnershipLost` and deletes nothing.
    """

    kind = "finalize"

    def __init__(self, sink: Sink) -> None:
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
        """Finalize ``run_id``'s attempts; returns the summary it wrote. Idempotent.

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
        sink = self.sink
        folder = sink.folder
        persisted = persisted if persisted is not None else read_persisted(folder)
        # Without exclusive ownership other runs' attempts belong to them (Lance: to
        # committed versions): only this run's are kept or removed.
        manifests = [m for m in persisted.manifests if sink.exclusive_owner or m.run_id == run_id]
        committed = choose_committed(_only_accepted(manifests, accepted, folder.url), run_id)
        keep = {m.key for m in committed.values()}
        fence = Fence(folder, lease)
        fence.check()
        commit = sink.commit(sorted(committed.values(), key=lambda m: m.shard_id), run_id)

        fence.check()
        empty_files = sink.write_empty_result(committed)
        fence.check()
        uploads = retry_open_uploads(folder)
        totals = committed_counters(committed.values())
        totals["files_written"] = totals.get("files_written", 0) + len(empty_files)
        totals["uploads_aborted"] = uploads["uploads_aborted"]
        assets = sink.assets
        summary = DatasetSummary(
            output=folder.url,
            format=sink.format,
            run_id=run_id,
            shards=len(committed),
            counters=totals,
            files=tuple(
                sorted(
                    [*(f for m in committed.values() for f in m.files), *empty_files, *commit.files]
                )
            ),
            asset_dirs=tuple(sorted(d for m in committed.values() for d in m.asset_dirs)),
            asset_subdir=assets.subdir if assets else None,
            asset_mode=assets.form if assets else None,
            missing_policy=assets.missing_policy if assets else None,
            commit=commit.record,
            open_uploads=tuple(uploads["open_uploads"]),
            finalized_at=time.time(),
            reference_audit=_combined_audit(committed),
            unaudited_files=_unaudited_files(committed),
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
        leftovers = self._remove_orphans(keep, run_id, fence)
        rejected |= leftovers.rejected
        files_removed += leftovers.removed
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

    def _remove_orphans(self, keep: set[tuple[str, str]], run_id: str, fence: Fence) -> Leftovers:
        """The sink's cleanup of attempts no manifest names (crashed ones)."""
        return self.sink.remove_leftovers(keep, run_id, fence.check)

    def _remove_manifest_temps(self, temporaries: tuple[str, ...]) -> int:
        """Delete manifests an attempt died while writing (their temporary files)."""
        for name in temporaries:
            self.sink.folder.rm(f"{MANIFEST_DIR}/{name}")
        return len(temporaries)

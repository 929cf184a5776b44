"""The finalization stage: keep one attempt per shard, delete the rest, commit, summarize."""

from __future__ import annotations

import json
import posixpath
import re
import time
from typing import Any

from ..execution.attempts import (
    ATTEMPT_ID_PATTERN,
    SHARD_ID_PATTERN,
    SUMMARY_PATH,
    choose_committed,
    committed_counters,
    manifest_path,
    read_manifests,
)

_ATTEMPT_DIR = re.compile(rf"(?P<shard>{SHARD_ID_PATTERN})__(?P<attempt>{ATTEMPT_ID_PATTERN})\Z")
# the hidden name a local atomic write uses until it completes: ".<name>.<8 hex>.tmp"
_TEMP_FILE = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp\Z")


def _completed_name(relative: str) -> str | None:
    """The file a leftover temporary file of an interrupted write would have become."""
    directory, base = posixpath.split(relative)
    match = _TEMP_FILE.match(base)
    if match is None:
        return None
    return posixpath.join(directory, match["name"]) if directory else match["name"]


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

    def run(self, run_id: str | None = None) -> dict[str, Any]:
        started = time.time()
        folder = self.sink.folder
        manifests = read_manifests(folder)
        if run_id is None and manifests:
            run_id = max(manifests, key=lambda m: m["completed_at"])["run_id"]
        manifests = self.select_manifests(manifests, run_id)
        committed = choose_committed(manifests, run_id) if run_id else {}
        keep = {(m["shard_id"], m["attempt_id"]) for m in committed.values()}
        commit_info = self.sink.commit(
            sorted(committed.values(), key=lambda m: m["shard_id"]), run_id
        )

        rejected: set[tuple[str, str]] = set()
        files_removed = 0
        for m in manifests:
            key = (m["shard_id"], m["attempt_id"])
            if key in keep:
                continue
            rejected.add(key)
            for relative in [*m.get("files", []), *m.get("asset_dirs", [])]:
                folder.rm(relative, recursive=True)
                files_removed += 1
            folder.rm(manifest_path(*key))
        files_removed += self._remove_orphans(keep, rejected)

        totals = committed_counters(committed.values())
        summary: dict[str, Any] = {
            "output": folder.url,
            "format": self.sink.format,
            "run_id": run_id,
            "shards": len(committed),
            **totals,
            "rejected_attempts_removed": len(rejected),
            "files_removed": files_removed,
            "files": sorted(f for m in committed.values() for f in m.get("files", [])),
            "asset_dirs": sorted(d for m in committed.values() for d in m.get("asset_dirs", [])),
            "asset_subdir": self.sink.assets.subdir if self.sink.assets else None,
            "asset_mode": type(self.sink.assets).__name__ if self.sink.assets else None,
            "missing_policy": self.sink.assets.missing_policy if self.sink.assets else None,
            "commit": commit_info,
            "finalized_at": time.time(),
            "elapsed_s": round(time.time() - started, 3),
        }
        folder.write_bytes(SUMMARY_PATH, json.dumps(summary, indent=1).encode())
        return summary

    def select_manifests(self, manifests: list[dict[str, Any]], run_id: str | None) -> list:
        """The manifests this finalization may keep or delete (all of them for plain files)."""
        return manifests

    def _remove_orphans(self, keep: set[tuple[str, str]], rejected: set[tuple[str, str]]) -> int:
        """Delete files and asset folders named for attempts that are not kept."""
        folder = self.sink.folder
        removed = 0
        template = getattr(self.sink, "template", None)
        if template is not None:
            for relative in self._candidate_files(template):
                parsed = template.parse(relative)
                if parsed is None and (completed := _completed_name(relative)) is not None:
                    parsed = template.parse(completed)
                if parsed and parsed not in keep:
                    folder.rm(relative)
                    rejected.add(parsed)
                    removed += 1
        if self.sink.assets is not None and folder.exists(self.sink.assets.subdir):
            subdir = self.sink.assets.subdir
            base = folder.join(subdir)
            for entry in folder.fs.ls(base, detail=False):
                name = entry.rstrip("/").rsplit("/", 1)[-1]
                match = _ATTEMPT_DIR.match(name)
                if match and (match["shard"], match["attempt"]) not in keep:
                    folder.rm(f"{subdir}/{name}", recursive=True)
                    rejected.add((match["shard"], match["attempt"]))
                    removed += 1
        return removed

    def _candidate_files(self, template: Any) -> list[str]:
        """Files that could carry the template's names (one listing when its folder is fixed)."""
        folder = self.sink.folder
        directory = posixpath.dirname(template.template)
        if "{" in directory:
            return [r for r in folder.find() if not r.startswith("_refiner/")]
        base = folder.join(directory) if directory else folder.path
        if not folder.fs.exists(base):
            return []
        names = [e.rstrip("/").rsplit("/", 1)[-1] for e in folder.fs.ls(base, detail=False)]
        return [f"{directory}/{n}" if directory else n for n in names]

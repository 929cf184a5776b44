"""``LanceSink``: pins the version a run builds on and commits its fragments exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ...errors import RefinerError
from ...io.datafile import is_local
from ...lance.dataset import (
    commit_fragments,
    dataset_schema,
    inspect_history,
    lance_storage_options,
    latest_version,
    schema_difference,
    schema_from_text,
)
from ...lance.isolation import call_isolated
from ...manifests import AttemptManifest, read_manifests
from ...vocabulary import LANCE_MODES, LanceMode
from ..files import FolderSink
from ..finalize import remove_attempt
from ..protocol import AttemptKey, Committed, Leftovers
from .writer import STATE_DIR, LanceAttemptWriter, journal_paths, state_path

# A version claim older than this belongs to a finalization that died; it is taken over.
CLAIM_LEASE_S = 600
# Names Lance uses at the top of a dataset; an asset subdir must not take them.
LANCE_RESERVED = ("data", "_versions", "_transactions", "_deletions", "_indices")


class LanceCommitConflict(RefinerError):
    """Another writer committed to the dataset after this run read it; nothing was committed."""


def _create_exclusive(folder: Any, relative: str, data: bytes) -> bool:
    """Create ``relative`` only if it does not exist yet; ``False`` when it already does."""
    path = folder.join(relative)
    try:
        if is_local(folder.fs):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "xb") as f:
                f.write(data)
        else:
            folder.fs.pipe_file(path, data, mode="create")
    except FileExistsError:
        return False
    return True


class LanceSink(FolderSink):
    """Writes a Lance dataset at ``output``; committed once, by the finalization stage.

    ``mode="create"`` refuses an existing dataset, ``"append"`` adds fragments to the
    version read when the run began (creating the dataset if there is none) and
    ``"overwrite"`` replaces it with this run's rows in a new version. Data files land
    in ``<output>/data/``; ``assets=`` files or blocks in ``<output>/<subdir>/``.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp() + "/episodes.lance"
        >>> stats = mdr.from_items([{"a": 1}, {"a": 2}]).write_lance(out).launch_local()
        >>> stats.summary.commit["version"], stats.summary.counters["rows_written"]
        (1, 2)
    """

    format = "lance"
    max_rows_per_file = 1024 * 1024
    max_rows_per_group = 1024
    # Lance spends about a millisecond on every batch it is handed, so a pipeline
    # without row steps hands it blocks of up to a file's rows (still within the
    # vectorized block byte cap) instead of the engine's default 65,536.
    arrow_block_rows = max_rows_per_file
    # Runs append to one dataset one after another and concurrently: the version
    # claims and the commit check settle who commits, and a run only ever deletes
    # its own attempts, so no run owns the whole folder.
    exclusive_owner = False

    def __init__(
        self,
        output: str,
        *,
        mode: LanceMode = "create",
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if mode not in LANCE_MODES:
            raise ValueError(f"write_lance mode must be one of {LANCE_MODES}, got {mode!r}")
        super().__init__(output, storage_options=storage_options, **options)
        if self.assets is not None and self.assets.subdir.split("/")[0] in LANCE_RESERVED:
            raise ValueError(
                f"write_lance: assets subdir {self.assets.subdir!r} is where Lance keeps its own "
                "files; choose another subdir, e.g. 'assets'"
            )
        self.mode = mode
        self.lance_options = lance_storage_options(storage_options)
        self._state: dict[str, Any] | None = None
        self._schemas: dict[int, pa.Schema] = {}

    # run state -------------------------------------------------------------------
    def _latest(self) -> int | None:
        return call_isolated(latest_version, self.url, self.lance_options)

    def prepare(self, run_id: str) -> None:
        """Pin the version this run builds on (checked again at commit); refuse a bad mode."""
        try:
            self._state = json.loads(self.folder.read_bytes(state_path("runs", run_id)))
            return
        except FileNotFoundError:
            pass
        version = self._latest()
        if version is not None and self.mode == "create":
            raise ValueError(
                f"write_lance(mode='create'): a Lance dataset already exists at {self.url} "
                f"(version {version}); pass mode='append' to add rows, "
                "mode='overwrite' to replace it, or write to another path"
            )
        state = {
            "run_id": run_id,
            "mode": self.mode,
            "url": self.url,
            "read_version": version,
            "prepared_at": time.time(),
        }
        self.folder.write_bytes(state_path("runs", run_id), json.dumps(state).encode())
        self._state = state

    def run_state(self, run_id: str) -> dict[str, Any]:
        """The state :meth:`prepare` recorded for ``run_id`` (read once per process)."""
        if self._state is not None and self._state["run_id"] == run_id:
            return self._state
        relative = state_path("runs", run_id)
        try:
            self._state = json.loads(self.folder.read_bytes(relative))
        except FileNotFoundError:
            raise ValueError(
                f"write_lance {self.url}: run {run_id} never started its write stage here "
                f"({self.folder.url_of(relative)} is missing); launch the whole sequence"
            ) from None
        return self._state

    def schema_for(self, schema: pa.Schema, state: dict[str, Any], *, where: str) -> pa.Schema:
        """The schema an attempt writes: the dataset's own when appending (checked first)."""
        read = state["read_version"]
        if state["mode"] != "append" or read is None:
            return schema
        if read not in self._schemas:
            self._schemas[read] = call_isolated(dataset_schema, self.url, self.lance_options, read)
        difference = schema_difference(self._schemas[read], schema)
        if difference:
            raise ValueError(
                f"{where}: cannot append to {self.url} version {read}: {difference}. Make the "
                "rows match (dtypes= declares types and asset marks; the same assets= config "
                "keeps the asset layout) or use mode='overwrite'"
            )
        return self._schemas[read]

    def fragment_spec(self, state: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
        """What an attempt's fragment writer needs (picklable, no Lance objects)."""
        read = state["read_version"]
        write_mode = (
            "create" if read is None else "append" if state["mode"] == "append" else "overwrite"
        )
        return {
            "url": self.url,
            "options": self.lance_options,
            "write_mode": write_mode,
            "read_version": read,
            "schema": schema,
            "max_rows_per_file": self.max_rows_per_file,
            "max_rows_per_group": self.max_rows_per_group,
        }

    def open_attempt(self, shard_id: str, attempt_id: str, run_id: str) -> LanceAttemptWriter:
        return LanceAttemptWriter(self, shard_id, attempt_id, self.run_state(run_id))

    # commit ----------------------------------------------------------------------
    def journals(self, run_id: str | None) -> list[tuple[str, dict[str, Any]]]:
        """``(path, entry)`` of the attempt journals of ``run_id``."""
        found = []
        for relative in self.folder.find(f"{STATE_DIR}/journal"):
            if relative.endswith(".json"):
                try:
                    entry = json.loads(self.folder.read_bytes(relative))
                except FileNotFoundError:  # removed meanwhile by another run's finalization
                    continue
                if entry.get("run_id") == run_id:
                    found.append((relative, entry))
        return found

    def _discard_run(self, run_id: str, message: str, kind: str = "invalid") -> None:
        """Delete everything ``run_id`` wrote and record why; the dataset stays as it was."""
        folder = self.folder
        for m in read_manifests(folder):
            if m.run_id == run_id:
                remove_attempt(folder, m)
        for relative, entry in self.journals(run_id):
            for path in journal_paths(entry):
                folder.rm(path, recursive=True)
            folder.rm(relative)
        record = {"run_id": run_id, "status": "failed", "kind": kind, "error": message}
        folder.write_bytes(state_path("commits", run_id), json.dumps(record).encode())

    def _record(self, state: dict[str, Any], version: int | None, **extra: Any) -> dict:
        record = {
            "run_id": state["run_id"],
            "status": "committed",
            "dataset": self.url,
            "mode": state["mode"],
            "read_version": state["read_version"],
            "version": version,
            **extra,
            "at": time.time(),
        }
        self.folder.write_bytes(state_path("commits", state["run_id"]), json.dumps(record).encode())
        return record

    def _moved(self, state: dict[str, Any], found: int | None, by: str = "") -> LanceCommitConflict:
        read = state["read_version"]
        was = f"read version {read}" if read is not None else "found no dataset"
        now = f"version {found}" if found is not None else "no dataset"
        message = (
            f"write_lance(mode={state['mode']!r}) {self.url}: the dataset moved while run "
            f"{state['run_id']} was writing: it {was} when the run began and found {now} at "
            f"commit{by}. Another writer committed first; nothing of this run was committed and "
            "its data files were removed. Launch the pipeline again (a new run) to write "
            "against the new version"
        )
        self._discard_run(state["run_id"], message, kind="conflict")
        return LanceCommitConflict(message)

    def _claim(self, state: dict[str, Any]) -> tuple[str | None, str]:
        """Reserve the next version for this run, so two refiner runs never both commit it.

        Returns the claim's path, or ``None`` and who holds it. A claim older than
        ``CLAIM_LEASE_S`` belongs to a finalization that died and is taken over.
        """
        target = (state["read_version"] or 0) + 1
        claim = state_path("claims", str(target))
        mine = json.dumps({"run_id": state["run_id"], "at": time.time()}).encode()
        owner: dict[str, Any] = {}
        for _ in range(2):
            if _create_exclusive(self.folder, claim, mine):
                return claim, ""
            with contextlib.suppress(FileNotFoundError, ValueError):
                owner = json.loads(self.folder.read_bytes(claim))
            if owner.get("run_id") == state["run_id"]:
                return claim, ""
            if time.time() - owner.get("at", 0) < CLAIM_LEASE_S:
                break
            self.folder.rm(claim)
        return None, f" (run {owner.get('run_id')} is committing version {target})"

    def _kept(self, committed: list[AttemptManifest], state: dict[str, Any]):
        """The kept fragments and their one schema (shards must agree on it)."""
        fragments: list[dict] = []
        schema = None
        for m in committed:
            info = m.extra.get("lance", {})
            fragments += info.get("fragments", [])
            if not info.get("schema"):
                continue
            this = schema_from_text(info["schema"])
            difference = schema_difference(schema, this) if schema is not None else None
            if difference:
                message = (
                    f"write_lance {self.url}: shard {m.shard_id} wrote another schema than "
                    f"the shards before it: {difference}. Declare the column types with dtypes= "
                    "so every shard writes the same schema"
                )
                self._discard_run(state["run_id"], message)
                raise ValueError(message)
            schema = schema or this
        return fragments, schema

    def remove_leftovers(
        self, keep: set[AttemptKey], run_id: str, check: Callable[[], None]
    ) -> Leftovers:
        """Delete the data files and asset folders of ``run_id``'s attempts that are not
        kept (crashed ones included, found through their journals), then the journals.

        Earlier runs' fragments belong to committed versions and are left alone."""
        leftovers = Leftovers()
        for relative, entry in self.journals(run_id):
            key = (entry["shard_id"], entry["attempt_id"])
            if key not in keep:
                check()
                for path in journal_paths(entry):
                    if self.folder.exists(path):  # a rejected manifest may have removed it
                        self.folder.rm(path, recursive=True)
                        leftovers.removed += 1
                leftovers.rejected.add(key)
            self.folder.rm(relative)
        return leftovers

    def commit(self, committed: list[AttemptManifest], run_id: str) -> Committed:
        """Commit every kept fragment in one Lance transaction, exactly once per run."""
        return Committed(self._commit(committed, run_id))

    def _commit(self, committed: list[AttemptManifest], run_id: str) -> dict[str, Any]:
        state = self.run_state(run_id)
        try:
            record = json.loads(self.folder.read_bytes(state_path("commits", run_id)))
        except FileNotFoundError:
            record = None
        if record is not None:
            if record.get("status") == "failed":
                error = LanceCommitConflict if record.get("kind") == "conflict" else ValueError
                raise error(record["error"])
            return {**record, "already_committed": True}
        read = state["read_version"]
        fragments, schema = self._kept(committed, state)
        if not fragments:
            if state["mode"] == "append":
                record = self._record(state, read, fragments=0, rows=0)
                return {**record, "already_committed": False}
            message = (
                f"write_lance(mode={state['mode']!r}) {self.url}: run {run_id} produced no rows, "
                "so there is nothing to commit (a Lance dataset needs at least one row to be "
                "created or overwritten). Check the source and filters, or use mode='append'"
            )
            self._discard_run(run_id, message)
            raise ValueError(message)

        claim, holder = self._claim(state)
        if claim is None:
            seen = call_isolated(inspect_history, self.url, self.lance_options, read or 0, run_id)
            if seen["committed"] is not None:
                return {**self._record(state, seen["committed"]), "already_committed": True}
            raise self._moved(state, seen["version"], holder)
        try:
            result = call_isolated(
                commit_fragments, self.url, self.lance_options, state, fragments, schema
            )
        finally:
            self.folder.rm(claim)
        if "committed" in result:
            return {**self._record(state, result["committed"]), "already_committed": True}
        if "moved" in result:
            raise self._moved(state, result["moved"])
        rows = sum(f["physical_rows"] for f in fragments)
        record = self._record(state, result["version"], fragments=len(fragments), rows=rows)
        return {**record, "already_committed": False}

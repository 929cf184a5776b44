"""A versioned dataset folder's versions, and moving its pointer back to an earlier one.

:func:`dataset_versions` lists what ``_versions/`` records (name, state, when it was
published, by which run, its parent, its rows) with the published one marked;
:func:`rollback` moves ``_current.json`` to an earlier published version in one atomic
write and deletes nothing. The move is recorded in the pointer's history (so
``as_of=`` follows it), in the pointer itself (``rolled_back``: from, to, by, why,
when) and in the version's record (``rollbacks``). The ``refiner history`` and
``refiner rollback`` commands and refiner_dagster's rollback job use these.

Example:
    >>> import json, tempfile
    >>> from refiner_core.io import DataFolder
    >>> folder = DataFolder(tempfile.mkdtemp())
    >>> for n, name in enumerate(["v-a", "v-b"]):
    ...     record = {"state": "published", "created_at": n, "published_at": 10.0 + n,
    ...               "parent": "v-a" if n else None}
    ...     folder.write_bytes(f"_versions/{name}.json", json.dumps(record).encode())
    ...     folder.write_bytes(f"{name}/part.parquet", b"...")
    >>> pointer = moved_pointer(None, {}, "v-a", at=10.0, action="publish")
    >>> folder.write_bytes("_current.json", json.dumps(
    ...     moved_pointer(pointer, {}, "v-b", at=11.0, action="publish")).encode())
    >>> rollback(folder, reason="bad labels", by="ana")["version"]
    'v-a'
    >>> [(v.name, v.current) for v in dataset_versions(folder)]
    [('v-a', True), ('v-b', False)]
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import RefinerError
from .datafile import DataFolder
from .version_history import moved_pointer
from .versions import CURRENT_POINTER, VERSION_PREFIX, VERSIONS_DIR, read_pointer

PUBLISHED = "published"


class RollbackRefused(RefinerError, ValueError):
    """The pointer was not moved: the message says why and what to pass instead."""


@dataclass(frozen=True)
class VersionInfo:
    """One version of a dataset folder, as its record and the pointer describe it."""

    name: str
    state: str
    created_at: float
    published_at: float | None
    run: str | None
    parent: str | None
    rows: int | None
    current: bool
    on_disk: bool
    record: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def appended_to(self) -> str | None:
        """The version this one added its rows to (``None``: written whole)."""
        return self.record.get("append_parent")

    @property
    def shown_state(self) -> str:
        """``published`` for the current version; a version readers left is ``superseded``."""
        if self.state == PUBLISHED and not self.current:
            return "superseded"
        return self.state


def is_dataset_folder(folder: DataFolder) -> bool:
    """Whether ``folder`` holds a pointer or version records."""
    return folder.exists(CURRENT_POINTER) or folder.exists(VERSIONS_DIR)


def dataset_versions(folder: DataFolder) -> list[VersionInfo]:
    """Every version ``folder``'s ``_versions/`` records, oldest first."""
    pointer = read_pointer(folder.fs, folder.path)
    current = pointer["version"] if pointer is not None else None
    found = []
    for relative in folder.find(VERSIONS_DIR):
        base = relative.rsplit("/", 1)[-1]
        if not (base.startswith(VERSION_PREFIX) and base.endswith(".json")):
            continue
        name = base[: -len(".json")]
        record = json.loads(folder.read_bytes(relative))
        found.append(_info(name, record, current == name, folder.exists(name)))
    return sorted(found, key=lambda v: (v.created_at, v.name))


def _info(name: str, record: dict[str, Any], current: bool, on_disk: bool) -> VersionInfo:
    rows = record.get("rows_written")
    if isinstance(rows, int):  # an append's rows include the ones it shares
        rows += int(record.get("inherited_rows") or 0)
    return VersionInfo(
        name=name,
        state=str(record.get("state", "writing")),
        created_at=float(record.get("created_at") or 0.0),
        published_at=record.get("published_at"),
        run=record.get("published_by") or record.get("dagster_run_id"),
        parent=record.get("parent"),
        rows=int(rows) if isinstance(rows, int) else None,
        current=current,
        on_disk=on_disk,
        record=record,
    )


def rollback(
    folder: DataFolder,
    *,
    to: str | None = None,
    reason: str | None = None,
    by: str | None = None,
    run: str | None = None,
) -> dict[str, Any]:
    """Point readers of dataset ``folder`` at the earlier published version ``to``
    (default: the current version's parent); returns the new pointer.

    Nothing is deleted. Refused (:class:`RollbackRefused`) when nothing is published,
    ``to`` is the current version, was never published or is no longer on storage, or
    when the pointer moved while this ran (another publish or rollback won; the newer
    pointer stays). ``by``/``reason``/``run`` are recorded with the move.
    """
    where = folder.url
    pointer = read_pointer(folder.fs, folder.path)
    if pointer is None:
        raise RollbackRefused(f"{where} has no published version, so there is nothing to roll back")
    current = pointer["version"]
    versions = {v.name: v for v in dataset_versions(folder)}
    retained = [
        n for n, v in versions.items() if v.state == PUBLISHED and v.on_disk and n != current
    ]
    choices = ", ".join(retained) or "none"
    if to is None:
        to = versions[current].parent if current in versions else pointer.get("parent")
        if to is None:
            raise RollbackRefused(
                f"{where}: the published version {current} has no parent (nothing was published "
                f"before it); pass the version to roll back to, one of: {choices}"
            )
    if to == current:
        raise RollbackRefused(f"{where}: {to} is already the published version; nothing to do")
    target = versions.get(to)
    if target is None or not target.on_disk or target.state != PUBLISHED:
        why = (
            "has no record"
            if target is None
            else "is no longer on storage (its retention policy deleted it)"
            if not target.on_disk
            else f"was never published (state {target.state!r}), so it never passed its audit"
        )
        raise RollbackRefused(
            f"{where}: cannot roll back to {to}: it {why}. Versions to roll back to: {choices}"
        )
    now = time.time()
    move = {"at": now, "from": current, "to": to, "by": by, "reason": reason, "run": run}
    record = dict(target.record)
    record["rollbacks"] = [*record.get("rollbacks", []), move]
    record["updated_at"] = now
    again = read_pointer(folder.fs, folder.path)
    if again != pointer:  # the same check a publish makes right before it writes
        raise RollbackRefused(
            f"{where}: the published version changed to {again['version'] if again else None} "
            "while rolling back, so the pointer was left as it is; look at `refiner history` "
            "and run the rollback again if it is still wanted"
        )
    folder.write_bytes(f"{VERSIONS_DIR}/{to}.json", json.dumps(record, indent=1).encode())
    fields = {**record, "url": folder.url_of(to), "rolled_back": move}
    fields.pop("inherits", None)  # an append's list of shared files stays in its record
    details = {"by": by, "reason": reason, "run": run, "from": current}
    moved = moved_pointer(pointer, fields, to, at=now, action="rollback", **details)
    folder.write_bytes(CURRENT_POINTER, json.dumps(moved, indent=1).encode())
    return moved

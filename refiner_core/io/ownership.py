"""One writing owner per output folder: records taken atomically, heartbeated, released.

The owner of a folder is the record with the highest generation under
``<output>/_refiner/owners/``. A writer becomes the owner by creating the next
generation's record exclusively (``O_EXCL`` on local disk, a conditional put with
``If-None-Match: *`` on object stores), so of two writers racing for one folder
exactly one wins. The owner rewrites its record every ``stale_after_s / 4`` seconds
(its heartbeat) and marks it released when it is done.

A folder whose owner is live cannot be taken: :class:`OutputFolderBusy` names the
folder and the owner. An owner is no longer live when it released the folder, when
it ran on this machine and its process has exited, or when its heartbeat is older
than ``stale_after_s`` (default :data:`DEFAULT_STALE_AFTER_S`, 120 s). A heartbeat's
age is judged by the store's clock (the record's mtime or ``LastModified`` against a
probe written just before), never by the writers' wall clocks, so a host whose clock
runs ahead cannot take a live folder. Anyone that held an older generation has lost
the folder and must not publish, delete or overwrite anything (:meth:`Lease.check`
raises :class:`OwnershipLost` naming the run that took it).

Example:
    >>> import tempfile
    >>> from refiner_core.io import DataFolder
    >>> folder = DataFolder(tempfile.mkdtemp())
    >>> first = OutputOwnership(folder, run_id="run-a")
    >>> first.acquire().generation
    1
    >>> try:
    ...     OutputOwnership(folder, run_id="run-b").acquire()
    ... except OutputFolderBusy as exc:
    ...     print("busy:", exc.owner.run_id)
    busy: run-a
    >>> first.release()
    >>> OutputOwnership(folder, run_id="run-b").acquire().generation
    2
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

import psutil

from ..errors import RefinerError
from .datafile import DataFolder, is_local, temp_name

OWNERS_DIR = "_refiner/owners"
DEFAULT_STALE_AFTER_S = 120.0
_HEARTBEATS_PER_LEASE = 4
_RECORD_SUFFIX = ".json"

# Held while a heartbeat writes, and across fork(): a child never starts with a
# half-finished heartbeat write's locks held.
_WRITING = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_WRITING.acquire,
        after_in_parent=_WRITING.release,
        after_in_child=_WRITING.release,
    )


_LIVE_LAUNCHES: set[str] = set()
"""Launch ids that hold an output folder in this process."""


class OutputFolderBusy(RefinerError):
    """Another live run owns the output folder; nothing was written."""

    def __init__(self, message: str, *, folder: str, owner: OwnerRecord) -> None:
        super().__init__(message)
        self.folder = folder
        self.owner = owner


class OwnershipLost(RefinerError):
    """This run no longer owns the output folder (another run took it over).

    ``winner`` is the run id of the folder's owner now (``None`` when it is unknown).
    """

    def __init__(self, message: str, *, winner: str | None = None) -> None:
        super().__init__(message)
        self.winner = winner


def machine_id() -> str:
    """This machine (and process namespace): hostname, boot id and pid namespace.

    Two containers that share a hostname still differ, so a process id is only
    compared with processes it could actually be.
    """
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        parts.append(f.read().strip())
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    return "/".join(parts)


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started (``None`` if there is no such process)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@dataclass(frozen=True)
class OwnerRecord:
    """Who owns an output folder: the run, the launch, its process and its heartbeat."""

    generation: int
    run_id: str
    launch_id: str
    host: str
    machine: str
    pid: int
    pid_started_at: float | None
    acquired_at: float
    heartbeat_at: float
    stale_after_s: float
    released_at: float | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> OwnerRecord:
        return cls(**json.loads(data))

    def ended_in_this_process(self) -> bool:
        """Whether this process made the record in a launch that is over (one whose
        release could not be written, say because the store failed)."""
        return (
            self.pid == os.getpid()
            and self.machine == machine_id()
            and self.launch_id not in _LIVE_LAUNCHES
        )

    def process_gone(self) -> bool:
        """Whether the owning process ran on this machine and has exited since."""
        if self.machine != machine_id():
            return False
        started = process_started_at(self.pid)
        return started is None or (
            self.pid_started_at is not None and abs(started - self.pid_started_at) > 1.0
        )

    def why_not_live(self, age: float, stale_after_s: float) -> str | None:
        """``None`` while the owner is live, else why not (released, exited, ended, stale).

        ``age`` is how long ago, by the store's clock, the record was last written.
        """
        if self.released_at is not None:
            return "released"
        if self.ended_in_this_process():
            return f"its launch {self.launch_id} in this process has ended"
        if self.process_gone():
            return f"its process {self.pid} on {self.host} has exited"
        if age > stale_after_s:
            return f"no heartbeat for {age:.0f} s (more than {stale_after_s:g} s)"
        return None

    def describe(self, age: float) -> str:
        return (
            f"run {self.run_id} (launch {self.launch_id}, pid {self.pid} on {self.host}, "
            f"last heartbeat {max(0.0, age):.1f} s ago)"
        )


def _record_name(generation: int) -> str:
    return f"{generation:010d}{_RECORD_SUFFIX}"


def _generations(folder: DataFolder) -> list[int]:
    out = []
    for name in folder.listdir(OWNERS_DIR):
        stem = name[: -len(_RECORD_SUFFIX)]
        if name.endswith(_RECORD_SUFFIX) and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def _modified_at(info: dict[str, Any]) -> float | None:
    """When the store last wrote an entry of a detailed listing (local ``mtime``, S3
    ``LastModified``), as a POSIX time of the store's clock."""
    for key in ("LastModified", "mtime", "last_modified", "updated"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


def record_ages(folder: DataFolder, probe_name: str) -> dict[int, float]:
    """How long ago, by the store's clock, each owner record was last written.

    Writes a probe object next to the records and lists them in one go: the probe's
    modification time is the store's "now", so neither this host's clock nor the
    writers' clocks take part. Resolution is the store's (one second on S3).
    """
    probe = f"{OWNERS_DIR}/{probe_name}"
    folder.write_bytes(probe, b"")
    base = folder.join(OWNERS_DIR)
    try:
        if not is_local(folder.fs):
            folder.fs.invalidate_cache(base)
        with folder._context("ListObjectsV2", base):
            entries = folder.fs.ls(base, detail=True, refresh=True)
    finally:
        folder.rm(probe)
    times: dict[str, float] = {}
    for entry in entries:
        modified = _modified_at(entry)
        if modified is not None:
            times[entry["name"].rstrip("/").rsplit("/", 1)[-1]] = modified
    now = times.get(probe_name)
    if now is None:
        raise OSError(f"{folder.url_of(probe)}: the store lists no modification time")
    ages = {}
    for name, modified in times.items():
        stem = name[: -len(_RECORD_SUFFIX)]
        if name.endswith(_RECORD_SUFFIX) and stem.isdigit():
            ages[int(stem)] = max(0.0, now - modified)
    return ages


def _create_exclusive(folder: DataFolder, relative: str, data: bytes) -> bool:
    """Create ``relative`` only if nothing is there yet; ``False`` when something is."""
    path = folder.join(relative)
    if not is_local(folder.fs):
        try:
            with folder._context("PutObject", path):
                folder.fs.pipe_file(path, data, mode="create")  # If-None-Match: *
        except FileExistsError:
            return False
        return True
    # Written whole under a temporary name, then linked to its name: link() fails if
    # the name exists, so the record appears complete or not at all.
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, temp_name(name))
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    return True


def current_owner(folder: DataFolder) -> OwnerRecord | None:
    """The record of the folder's highest generation (``None`` if it never had one)."""
    for generation in reversed(_generations(folder)):
        try:
            return OwnerRecord.from_bytes(
                folder.read_bytes(f"{OWNERS_DIR}/{_record_name(generation)}")
            )
        except FileNotFoundError:
            continue  # removed by the owner that superseded it; look again below
        except (ValueError, TypeError):
            # written by a process that died mid-write on a store without atomic
            # puts: an owner that never finished taking the folder is no owner
            return _unreadable_record(generation)
    return None


def _unreadable_record(generation: int) -> OwnerRecord:
    return OwnerRecord(
        generation=generation,
        run_id="?",
        launch_id="?",
        host="?",
        machine="?",
        pid=0,
        pid_started_at=None,
        acquired_at=0.0,
        heartbeat_at=0.0,
        stale_after_s=0.0,
        released_at=0.0,
    )


@dataclass(frozen=True)
class Lease:
    """What a worker carries to check, before it publishes, that its launch still owns
    the folder (picklable; one listing per check)."""

    folder: DataFolder
    generation: int
    run_id: str

    def check(self) -> None:
        """Raise :class:`OwnershipLost`, naming the run that took the folder, unless this
        lease's generation is still the folder's latest."""
        generations = _generations(self.folder)
        latest = generations[-1] if generations else None
        if latest == self.generation:
            return
        owner = current_owner(self.folder)
        winner = owner.run_id if owner is not None and owner.run_id != "?" else None
        by = f"run {winner} took it over" if winner else "its owner record is gone"
        raise OwnershipLost(
            f"{self.folder.url}: run {self.run_id} no longer owns this output folder ({by}; "
            f"it held owner generation {self.generation}, the folder is now at {latest}); "
            "this run's files are not published and it deleted nothing after it found out. "
            f"The output is the one {f'run {winner}' if winner else 'the later run'} wrote; "
            "launch again once it is done to replace it",
            winner=winner,
        )


class OutputOwnership:
    """Takes, heartbeats and releases the ownership of one output folder for one run.

    ``stale_after_s`` is how long an owner may go without a heartbeat before another
    run may take the folder over; the owner heartbeats four times in that time.
    """

    def __init__(
        self,
        folder: DataFolder,
        *,
        run_id: str,
        launch_id: str | None = None,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
    ) -> None:
        if not stale_after_s > 0:
            raise ValueError(f"stale_after_s must be positive, got {stale_after_s!r}")
        self.folder = folder
        self.run_id = run_id
        self.launch_id = launch_id or uuid.uuid4().hex[:12]
        self.stale_after_s = float(stale_after_s)
        self.record: OwnerRecord | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: OwnershipLost | None = None

    # taking and giving back ------------------------------------------------------------
    def acquire(self) -> OwnerRecord:
        """Become the folder's owner, or raise :class:`OutputFolderBusy` at once."""
        probe = f"clock-{self.launch_id}.probe"
        for _ in range(5):
            now = time.time()
            owner = current_owner(self.folder)
            # the store's clock judges the heartbeat; a record written after the listing
            # is as fresh as can be
            age = record_ages(self.folder, probe).get(owner.generation, 0.0) if owner else 0.0
            # the owner's own lease decides: a shorter timeout here cannot cut it short
            lease_s = max(self.stale_after_s, owner.stale_after_s) if owner else 0.0
            if owner is not None and owner.why_not_live(age, lease_s) is None:
                raise OutputFolderBusy(
                    f"{self.folder.url} is being written by {owner.describe(age)}; one run "
                    "writes an output folder at a time. Wait for that run to finish, write to "
                    "another folder, or, if it is dead, it is taken over once it has had no "
                    f"heartbeat for {lease_s:g} s",
                    folder=self.folder.url,
                    owner=owner,
                )
            generation = (owner.generation if owner else 0) + 1
            record = self._new_record(generation, now)
            if _create_exclusive(self.folder, self._relative(generation), record.to_bytes()):
                _LIVE_LAUNCHES.add(self.launch_id)
                self.record = record
                self._forget_older(generation)
                return record
            # another writer took this generation first: look at who it is
        raise OutputFolderBusy(
            f"{self.folder.url}: other writers keep taking this output folder",
            folder=self.folder.url,
            owner=current_owner(self.folder) or record,
        )

    def _new_record(self, generation: int, now: float) -> OwnerRecord:
        pid = os.getpid()
        return OwnerRecord(
            generation=generation,
            run_id=self.run_id,
            launch_id=self.launch_id,
            host=socket.gethostname(),
            machine=machine_id(),
            pid=pid,
            pid_started_at=process_started_at(pid),
            acquired_at=now,
            heartbeat_at=now,
            stale_after_s=self.stale_after_s,
        )

    def _relative(self, generation: int) -> str:
        return f"{OWNERS_DIR}/{_record_name(generation)}"

    def _forget_older(self, generation: int) -> None:
        if generation == 1:  # the first owner: there is no older record to list
            return
        for older in _generations(self.folder):
            if older < generation:
                self.folder.rm(self._relative(older))

    def lease(self) -> Lease:
        assert self.record is not None, "acquire() first"
        return Lease(self.folder, self.record.generation, self.run_id)

    def check(self) -> None:
        """Raise :class:`OwnershipLost` if another run has taken the folder over."""
        if self._lost is not None:
            raise self._lost
        self.lease().check()

    def heartbeat(self) -> None:
        """Refresh the record's heartbeat (after checking the folder is still ours)."""
        self.check()
        assert self.record is not None
        self.record = replace(self.record, heartbeat_at=time.time())
        self._write_record()

    def _write_record(self) -> None:
        """Write this run's record, then check again: a run paused between its check and
        the write (SIGSTOP, a long GC) may have lost the folder meanwhile, and then takes
        back the stale record it just wrote instead of leaving it in the new owner's folder."""
        assert self.record is not None
        relative = self._relative(self.record.generation)
        with _WRITING:
            self.folder.write_bytes(relative, self.record.to_bytes())
        try:
            self.lease().check()
        except OwnershipLost:
            with contextlib.suppress(OSError):
                self.folder.rm(relative)
            raise

    def release(self) -> None:
        """Stop heartbeating and mark the record released (a no-op once lost)."""
        self.stop_heartbeats()
        _LIVE_LAUNCHES.discard(self.launch_id)
        if self.record is None:
            return
        # Runs in a launch's ``finally``: a store that fails here must not hide the
        # launch's own error; the record then ends as a dead or stale owner.
        with contextlib.suppress(OwnershipLost, OSError):
            self.lease().check()
            self.record = replace(self.record, released_at=time.time())
            self._write_record()

    # background heartbeats --------------------------------------------------------------
    def start_heartbeats(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._beat, name="refiner-owner-heartbeat", daemon=True
        )
        self._thread.start()

    def stop_heartbeats(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _beat(self) -> None:
        interval = self.stale_after_s / _HEARTBEATS_PER_LEASE
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except OwnershipLost as exc:
                self._lost = exc
                return
            except Exception:  # a failed heartbeat is retried at the next interval
                continue

    def __enter__(self) -> OutputOwnership:
        self.acquire()
        self.start_heartbeats()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

"""Keeping Lance out of the process that forks refiner's workers.

Lance is not fork-safe: once a process has used it, a child forked from that process
may crash inside Lance. ``launch_local`` forks its workers, so the process that plans,
prepares and commits (the one that imported refiner) never calls Lance itself.
:func:`call_isolated` sends each call to a helper process forked from it once, before
it ever used Lance (calls that cannot be pickled run in a child forked for them), and
:func:`iter_isolated` streams Arrow tables back from a child forked per stream.
Worker processes, forked from a process that never used Lance, call it directly.
Once the program calls Lance itself (see :mod:`~refiner_core.lance.usage`), forking it
is unsafe for helpers too: refiner's calls then run in it, and ``launch_local`` starts
its workers with spawn.

Why this stays rather than starting Lance workers with ``forkserver``/``spawn`` (which
need no isolation, and which ``launch_local(start_method=...)`` offers): such a worker
receives its stage by value, pickled, where a forked one shares the launcher's memory.
Measured with ``bench/bench_lance.py --workers 1 --repeat 5 --start-method forkserver``
(1M rows x 10 columns held in the pipeline), write_lance took 0.686 s against 0.191 s
forked, 4.6x instead of 1.27x a fresh ``lance.write_dataset`` (target 1.3x), while
``bench_launch.py`` puts a fork-server stage's fixed cost at 0.03 s. Fork stays the
default for Lance work, and with it this module.

Example:
    >>> from refiner_core.lance.isolation import call_isolated
    >>> call_isolated(pow, 2, 10)
    1024
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import lance  # noqa: F401  (imported here, once: importing is fork-safe, using it is not)
import pyarrow as pa

from .usage import isolating, make_home, stop_isolating

# Lance warns on every fork once imported; refiner keeps Lance out of the forking process.
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)

make_home()
_HELPER: _Helper | None = None
_HELPER_LOCK = threading.Lock()


def call_lance_here() -> None:
    """Call Lance in this process from now on: for a worker that was started fresh
    (spawn, forkserver) and so forks no workers of its own."""
    stop_isolating()


def read_exactly(f: Any, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError
    return data


def _dumps(result: tuple[str, Any]) -> bytes:
    try:
        return pickle.dumps(result)
    except Exception as exc:
        return pickle.dumps(("error", RuntimeError(f"{result[1]!r} ({exc})")))


def _answer(fn: Callable[..., Any], args: tuple) -> bytes:
    try:
        result: tuple[str, Any] = ("ok", fn(*args))
    except BaseException as exc:  # sent back to the caller and raised there
        result = ("error", exc)
    return _dumps(result)


def child_result(fn: Callable[..., Any], args: tuple, write_fd: int) -> None:
    """Run ``fn(*args)`` and write the pickled outcome to ``write_fd`` (in a child)."""
    data = _answer(fn, args)
    with os.fdopen(write_fd, "wb") as f:
        f.write(data)


def write_table_frame(out: Any, table: pa.Table | None) -> None:
    """Write ``table`` to ``out`` as one length-prefixed Arrow IPC stream; ``None``
    writes the zero-length frame that ends a stream."""
    if table is None:
        out.write((0).to_bytes(8, "little"))
        return
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    buffer = sink.getvalue()
    out.write(buffer.size.to_bytes(8, "little"))
    out.write(buffer)


def read_table_frames(f: Any) -> Iterator[pa.Table]:
    """The tables :func:`write_table_frame` wrote to ``f``, up to the ending frame;
    ``EOFError`` when the stream stops before it (the writer died)."""
    while size := int.from_bytes(read_exactly(f, 8), "little"):
        yield pa.ipc.open_stream(pa.py_buffer(read_exactly(f, size))).read_all()


def _frame(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


class _Helper:
    """A child forked once that runs pickled calls, one at a time, until its pipe closes."""

    def __init__(self) -> None:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - runs in the helper
            os.close(request_w)
            os.close(reply_r)
            try:
                with os.fdopen(request_r, "rb") as requests, os.fdopen(reply_w, "wb") as replies:
                    while True:
                        try:
                            size = int.from_bytes(read_exactly(requests, 8), "little")
                        except EOFError:
                            break
                        try:
                            fn, args = pickle.loads(read_exactly(requests, size))
                        except Exception:  # e.g. defined after this helper was forked
                            replies.write(_frame(pickle.dumps(("unknown", None))))
                        else:
                            replies.write(_frame(_answer(fn, args)))
                        replies.flush()
            finally:
                os._exit(0)
        os.close(request_r)
        os.close(reply_w)
        self._requests = os.fdopen(request_w, "wb")
        self._replies = os.fdopen(reply_r, "rb")

    def call(self, payload: bytes) -> bytes:
        self._requests.write(_frame(payload))
        self._requests.flush()
        size = int.from_bytes(read_exactly(self._replies, 8), "little")
        return read_exactly(self._replies, size)

    def stop(self) -> None:
        for f in (self._requests, self._replies):
            with contextlib.suppress(OSError):
                f.close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def _call_helper(payload: bytes) -> bytes | None:
    """The helper's reply to ``payload``, or ``None`` if the helper died on it."""
    global _HELPER
    with _HELPER_LOCK:
        if _HELPER is None:
            _HELPER = _Helper()
        try:
            return _HELPER.call(payload)
        except BaseException as exc:
            _HELPER.stop()
            _HELPER = None
            if isinstance(exc, (EOFError, BrokenPipeError)):
                return None
            raise


def _call_forked(fn: Callable[..., Any], args: tuple) -> bytes | None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_fd)
        try:
            child_result(fn, args, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return data or None


def call_forked(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a child forked for this one call: its result, or its exception
    raised here. The child starts from this process's state, and nothing it does
    (using Lance included) comes back to this process."""
    data = _call_forked(fn, args)
    if data is None:
        raise RuntimeError(f"the child process running {fn!r} died without an answer")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return value


def call_isolated(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in the helper process when :func:`isolating`, else right here.

    The result (or the exception) comes back pickled. If the helper dies without an
    answer, this process had already used Lance itself (so its children crash in
    Lance); the call then runs here, and so do later ones.
    """
    if not isolating():
        return fn(*args)
    try:
        payload = pickle.dumps((fn, args))
    except Exception:
        payload = None
    data = _call_helper(payload) if payload is not None else _call_forked(fn, args)
    outcome = pickle.loads(data) if data is not None else None
    if outcome is not None and outcome[0] == "unknown":
        data = _call_forked(fn, args)
        outcome = pickle.loads(data) if data is not None else None
    if outcome is None:
        warnings.warn(
            "a Lance helper process died without an answer; this process has used Lance "
            "directly, so refiner calls Lance here from now on. Lance is not fork-safe: "
            "worker processes forked later may crash",
            RuntimeWarning,
            stacklevel=2,
        )
        stop_isolating()
        return fn(*args)
    kind, value = outcome
    if kind == "error":
        raise value
    return value


def iter_isolated(fn: Callable[..., Iterator[pa.Table]], *args: Any) -> Iterator[pa.Table]:
    """Yield the tables of ``fn(*args)``, produced in a forked child when :func:`isolating`."""
    if not isolating():
        yield from fn(*args)
        return
    data_r, data_w = os.pipe()
    error_r, error_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(data_r)
        os.close(error_r)
        try:
            with os.fdopen(data_w, "wb") as out:
                for table in fn(*args):
                    write_table_frame(out, table)
                write_table_frame(out, None)
            os.close(error_w)
        except BaseException as exc:
            with os.fdopen(error_w, "wb") as f:
                f.write(_dumps(("error", exc)))
        finally:
            os._exit(0)
    os.close(data_w)
    os.close(error_w)
    finished = complete = False
    try:
        with os.fdopen(data_r, "rb") as f:
            try:
                yield from read_table_frames(f)
                complete = True
            except EOFError:
                pass  # the child failed (its error follows) or died
        with os.fdopen(error_r, "rb") as f:
            error_r = -1
            data = f.read()
        finished = True
    finally:
        if not finished:
            os.kill(pid, signal.SIGKILL)
            if error_r >= 0:
                os.close(error_r)
        os.waitpid(pid, 0)
    if data:
        raise pickle.loads(data)[1]
    if not complete:
        raise RuntimeError(f"the process reading {fn!r} ended before its last table")

"""How ``launch_local`` starts its workers, and how a stage travels to them.

With ``"fork"`` a worker starts as a copy of the launcher and finds the stage in its
memory. With ``"forkserver"`` or ``"spawn"`` it starts as a fresh interpreter, so the
stage is sent to it pickled with cloudpickle: lambdas, closures and classes defined in
a function travel by value, functions of importable modules by reference (the worker
imports them). Objects that cannot be pickled (a lock, an open socket) belong in a
``factory=``, which each worker calls itself.

Example:
    >>> resolve_start_method("spawn")
    'spawn'
    >>> resolve_start_method(None) in ("fork", "spawn")
    True
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from dataclasses import dataclass
from typing import Any

import cloudpickle

from ..lance.usage import lance_runs_here

START_METHODS = ("fork", "forkserver", "spawn")
_LAUNCHER_MODULE = "refiner_core.execution.launcher"


def resolve_start_method(start_method: str | None) -> str:
    """The start method to use: ``start_method`` checked against this platform, or for
    ``None`` fork where it is available and safe, else spawn.

    Fork copies the launcher, which is unsafe once Lance has started in it: the program
    called Lance itself (opened or wrote a dataset), or refiner's helper process died.
    Lance merely imported keeps fork, the fast start, since refiner's own Lance calls
    run in helper processes. The fallback is spawn rather than forkserver because the
    fork server imports the launching script's top level, and forks workers from that:
    a script that calls Lance there would make them unsafe again, while each spawned
    worker is a fresh interpreter of its own."""
    available = multiprocessing.get_all_start_methods()
    if start_method is None:
        return "fork" if "fork" in available and not lance_runs_here() else "spawn"
    if start_method not in START_METHODS:
        raise ValueError(
            f"launch_local: start_method={start_method!r} is not one of {START_METHODS}; "
            "pass one of them, or None for the default (fork where it is safe)"
        )
    if start_method not in available:
        raise ValueError(
            f"launch_local: start_method={start_method!r} is not available on this platform "
            f"(it has {available})"
        )
    return start_method


def worker_context(start_method: str) -> Any:
    """The multiprocessing context that starts workers. The fork server (Python's, one
    per process, started on first use) imports refiner before it forks any worker, so
    each worker starts in milliseconds instead of importing refiner anew."""
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["__main__", _LAUNCHER_MODULE])
    elif start_method == "fork":
        settle_pyarrow_pandas_check()
    return ctx


def settle_pyarrow_pandas_check() -> None:
    """Let pyarrow make, in the launcher, the check it makes on its first conversion of
    a Python list in a process: whether pandas is installed, importing it if so (about
    0.2 s). Forked workers inherit the answer instead of each paying for it; the
    launcher pays once, not once per launch."""
    import pyarrow as pa

    pa.array([None])


@dataclass(frozen=True)
class PickledStage:
    """A stage as cloudpickle bytes, on its way to a worker started fresh, with the
    launcher's environment when the worker comes from the fork server (which has the
    environment of the moment it started, once per process)."""

    data: bytes
    name: str
    environ: dict[str, str] | None = None


def stage_for_workers(stage: Any, start_method: str) -> Any:
    """What a worker receives: the stage itself under fork, else :class:`PickledStage`.

    A stage that cannot be pickled fails here, before any worker starts, naming the
    stage and what could not be pickled."""
    if start_method == "fork":
        return stage
    environ = dict(os.environ) if start_method == "forkserver" else None
    try:
        return PickledStage(cloudpickle.dumps(stage), stage.name, environ)
    except Exception as exc:
        raise TypeError(
            f"launch_local(start_method={start_method!r}): stage {stage.name!r} cannot be "
            f"sent to worker processes: {type(exc).__name__}: {exc}. Build unpicklable "
            "objects (clients, locks, open files) inside a factory= callback, which runs "
            "in each worker, or use start_method='fork'"
        ) from exc


def stage_in_worker(received: Any) -> Any:
    """The stage a worker runs, from what :func:`stage_for_workers` sent it.

    A worker started fresh never forks refiner workers of its own, so Lance (if the
    stage uses it) is called right here instead of in a helper process."""
    if not isinstance(received, PickledStage):
        return received
    if received.environ is not None:
        os.environ.clear()
        os.environ.update(received.environ)
    stage = cloudpickle.loads(received.data)
    if "lance" in sys.modules:
        from ..lance.isolation import call_lance_here

        call_lance_here()
    return stage

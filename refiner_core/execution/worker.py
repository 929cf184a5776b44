"""Worker-local state: one event loop per worker and the callbacks its factories built."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

from ..errors import CallbackResultError

_UNWIND_TIMEOUT_S = 30.0


def _is_plain_function(obj: Any) -> bool:
    return inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isbuiltin(obj)


class _Tracked:
    """Runs a coroutine on the loop and tells another thread when it has fully unwound."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.started = False
        self.finished = threading.Event()

    async def run(self) -> Any:
        self.started = True
        try:
            return await self.coro
        finally:
            self.finished.set()

    def finish_if_never_started(self) -> None:
        """On the loop, after a cancel: a task cancelled before its first step never runs."""
        if not self.started:
            self.coro.close()
            self.finished.set()


class WorkerContext:
    """Owns the worker's event loop (on its own thread) and its callback resources.

    Every async step of every shard this worker runs shares the one loop. Factory
    results are built once, lazily, and closed (``aclose()`` or ``close()``) once in
    :meth:`close`, also after a failure.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="refiner-loop", daemon=True)
        self._thread.start()
        self._callbacks: dict[str, Any] = {}
        self._resources: list[Any] = []
        self._closed = False

    def _run_loop(self) -> None:
        """Run the loop until :meth:`close` stops it. asyncio re-raises a
        ``KeyboardInterrupt``/``SystemExit`` that a callback raised out of the loop after
        storing it in the task; the loop goes on so the waiting caller receives it."""
        while True:
            try:
                self.loop.run_forever()
                return
            except (KeyboardInterrupt, SystemExit):
                continue

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the worker loop and wait for its result.

        If the wait is interrupted (a signal, ``KeyboardInterrupt``), ``coro`` is
        cancelled and given time to unwind, so its cleanup runs before this raises.
        """
        tracked = _Tracked(coro)
        future = asyncio.run_coroutine_threadsafe(tracked.run(), self.loop)
        try:
            return future.result()
        except BaseException:
            if not tracked.finished.is_set():
                future.cancel()
                self.loop.call_soon_threadsafe(tracked.finish_if_never_started)
                tracked.finished.wait(_UNWIND_TIMEOUT_S)
            raise

    def callback(self, step: Any) -> Any:
        found = self._callbacks.get(step.uid)
        if found is not None:
            return found
        if step.fn is not None:
            callback = step.fn
            if not _is_plain_function(callback) and hasattr(callback, "aclose"):
                self._resources.append(callback)
        else:
            callback = step.factory()
            if not callable(callback):
                raise CallbackResultError(
                    f"{step.label}: factory {step.factory!r} returned {type(callback).__name__}, "
                    "which is not callable; return a function, an async function or an object "
                    "with __call__"
                )
            if hasattr(callback, "aclose") or hasattr(callback, "close"):
                self._resources.append(callback)
        self._callbacks[step.uid] = callback
        return callback

    async def _close_resources(self) -> list[BaseException]:
        errors: list[BaseException] = []
        await self.loop.shutdown_asyncgens()
        for resource in self._resources:
            try:
                if hasattr(resource, "aclose"):
                    result = resource.aclose()
                else:
                    result = resource.close()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # keep closing the others
                errors.append(exc)
        return errors

    def close(self) -> None:
        """Close every callback resource once, then stop the loop."""
        if self._closed:
            return
        self._closed = True
        try:
            errors = self.run(self._close_resources())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()
        if errors:
            raise RuntimeError(f"closing worker callbacks failed: {errors[0]!r}") from errors[0]

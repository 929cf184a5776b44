"""A sliding window of part uploads running on an event loop owned by another thread.

The writer thread hands each sealed part to :meth:`PartWindow.submit`, which starts
its coroutine on the loop (s3fs's, from ``fsspec.asyn``) and returns at once while
fewer than ``size`` parts are in flight. With ``size`` in flight it waits for the
first one to finish, so a slow part holds one slot, never the others. Memory is
bounded by the parts in flight plus the one the writer holds.

A part that failed is reported by the next :meth:`~PartWindow.submit` or by
:meth:`~PartWindow.finish`, before anything else is sent; :meth:`~PartWindow.drain`
then waits for the parts still in flight (they are not cancelled: S3 may store a part
whose request it already received even after the client gave up on it, and it must
not land after the upload is aborted).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["PartWindow"]

SendPart = Callable[[int, Any], Coroutine[Any, Any, Any]]


class PartWindow:
    """At most ``size`` calls of ``send(number, body)`` in flight on ``loop``.

    ``loop`` runs in another thread; every method is called from the writer's thread.

    >>> import asyncio, fsspec.asyn
    >>> async def send(number, body):
    ...     await asyncio.sleep(0.01 * (4 - number))  # later parts finish first
    ...     return {"PartNumber": number, "Size": len(body)}
    >>> window = PartWindow(fsspec.asyn.get_loop(), send, size=2)
    >>> for number in (1, 2, 3):
    ...     window.submit(number, b"x" * number)
    >>> window.finish()  # in part-number order
    [{'PartNumber': 1, 'Size': 1}, {'PartNumber': 2, 'Size': 2}, {'PartNumber': 3, 'Size': 3}]
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, send: SendPart, *, size: int) -> None:
        if size < 1:
            raise ValueError(f"a part window holds at least one part, got size={size}")
        self._loop = loop
        self._send = send
        self.size = size
        self._in_flight: dict[int, concurrent.futures.Future] = {}
        self._results: dict[int, Any] = {}
        self.failed_part: int | None = None
        """The number of the part whose failure was raised, once one was."""

    @property
    def in_flight(self) -> int:
        """Parts submitted whose upload has not been collected yet."""
        return len(self._in_flight)

    def submit(self, number: int, body: Any) -> None:
        """Start sending part ``number``; block while ``size`` parts are in flight.

        Raises the error of a part that failed since the last call, without sending."""
        self._check_off_loop()
        self._collect(wait=None)
        while self._full():
            self._collect(wait=concurrent.futures.FIRST_COMPLETED)
        coroutine = self._send(number, body)
        self._in_flight[number] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def finish(self) -> list[Any]:
        """Wait for every part; their results in part-number order, or the first error."""
        self._check_off_loop()
        while self._in_flight:
            self._collect(wait=concurrent.futures.FIRST_EXCEPTION)
        return [self._results[number] for number in sorted(self._results)]

    def drain(self) -> None:
        """Wait until no part is in flight, discarding their results and errors."""
        self._check_off_loop()
        futures = list(self._in_flight.values())
        concurrent.futures.wait(futures)
        self._in_flight.clear()
        for future in futures:
            if not future.cancelled():
                future.exception()  # retrieved, so asyncio does not log it as lost

    def _check_off_loop(self) -> None:
        # waiting for the loop from its own thread would never return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is self._loop:
            raise RuntimeError(
                "a PartWindow waits for its event loop, so it cannot be used from a coroutine "
                "running on that loop; write the file from another thread"
            )

    def _full(self) -> bool:
        return len(self._in_flight) >= self.size

    def _collect(self, *, wait: str | None) -> None:
        """Move finished parts to the results (after waiting as ``wait`` says); raise
        the first failure among them."""
        if wait is not None and self._in_flight:
            concurrent.futures.wait(self._in_flight.values(), return_when=wait)
        for number, future in sorted(self._in_flight.items()):
            if not future.done():
                continue
            del self._in_flight[number]
            if future.cancelled():
                self.failed_part = number
                raise RuntimeError(f"the upload of part {number} was cancelled")
            error = future.exception()
            if error is not None:
                self.failed_part = number
                raise error
            self._results[number] = future.result()

"""The async row transforms: ``map_async`` and ``batch_map_async``.

Each keeps up to ``max_in_flight`` calls running (a :class:`_Window`), whatever the
consumer downstream is doing, and hands the results on in submission order when
``preserve_order`` is set, else as they finish.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..errors import CallbackResultError
from ..row import Row
from ..validation import check_positive
from .callbacks import merge_map_result, rows_from_iterable
from .steps import Blocks, Step, StepContext, batches_of, maybe_await


class _Window:
    """Bounded set of in-flight calls with fail-fast error tracking.

    Ordered windows hand results back in submission order; unordered ones in the
    order the calls finished (recorded by a done callback, so ties keep that order).
    """

    def __init__(self, step: Step, shard_id: str | None, limit: int, ordered: bool) -> None:
        self.step, self.shard_id, self.limit, self.ordered = step, shard_id, limit, ordered
        self.queue: collections.deque[asyncio.Task] = collections.deque()  # ordered
        self.pending: set[asyncio.Task] = set()  # unordered: still running
        self.finished: collections.deque[asyncio.Task] = collections.deque()  # unordered
        self.error: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._create_task = self._loop.create_task
        self._waiter: asyncio.Future | None = None

    def fail(self, exc: BaseException) -> None:
        """Called by a call as it raises: remember the first error and cancel the other
        pending calls now, which also wakes a take() waiting on an older call."""
        if self.error is None:
            self.error = exc
            current = asyncio.current_task()
            for other in (*self.queue, *self.pending):
                if other is not current:
                    other.cancel()

    def __len__(self) -> int:
        return len(self.queue) if self.ordered else len(self.pending) + len(self.finished)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self._create_task(coro)
        if self.ordered:
            self.queue.append(task)
        else:
            self.pending.add(task)
            task.add_done_callback(self._on_finished)

    def _on_finished(self, task: asyncio.Task) -> None:
        self.pending.discard(task)
        self.finished.append(task)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def check(self) -> None:
        if self.error is not None:
            raise self._wrap(self.error)

    def _wrap(self, exc: BaseException) -> BaseException:
        if isinstance(exc, CallbackResultError):
            return exc
        return self.step.fail(exc, self.shard_id)

    async def take(self) -> list[Any]:
        """Wait for at least one result (the oldest when ordered) and return ready ones."""
        self.check()
        if self.ordered:
            head = self.queue[0]  # stays queued while awaited, so a failure can cancel it
            try:
                results = [await head]
            except asyncio.CancelledError:
                if self.error is None:
                    raise
                raise self._wrap(self.error) from self.error
            except Exception as exc:
                raise self._wrap(exc) from exc
            self.queue.popleft()
            while self.queue and self.queue[0].done():
                results.append(self._result(self.queue.popleft()))
            return results
        if not self.finished:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.ready()

    def ready(self) -> list[Any]:
        """Results that are already there (in order when ordered), without waiting."""
        self.check()
        results = []
        if self.ordered:
            while self.queue and self.queue[0].done():
                results.append(self._result(self.queue.popleft()))
        else:
            while self.finished:
                results.append(self._result(self.finished.popleft()))
        return results

    def _result(self, task: asyncio.Task) -> Any:
        exc = task.exception()
        if exc is not None:
            raise self._wrap(exc) from exc
        return task.result()

    async def cancel(self) -> None:
        tasks = [*self.queue, *self.pending, *self.finished]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.queue.clear()
        self.pending.clear()
        self.finished.clear()


@dataclass(eq=False)
class MapAsyncStep(Step):
    kind = "map_async"
    max_in_flight: int = 16
    preserve_order: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("max_in_flight", self.max_in_flight)

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        label, shard = self.label, ctx.shard_id
        window = _Window(self, shard, self.max_in_flight, self.preserve_order)
        fn: Callable[..., Any] | None = None

        async def one(row: Row) -> Row:
            assert fn is not None  # resolved before the first call is submitted
            try:
                result = fn(row)
                if inspect.isawaitable(result):
                    result = await result
                return merge_map_result(row, result, label, shard)
            except Exception as exc:
                window.fail(exc)
                raise

        try:
            async for block in blocks:
                if fn is None:
                    fn = ctx.callback(self)
                out: list[Row] = []
                for row in block:
                    if len(window) >= window.limit:
                        out.extend(await window.take())
                    window.submit(one(row))
                out.extend(window.ready())
                if out:
                    yield out
            while len(window):
                yield await window.take()
        finally:
            await window.cancel()


@dataclass(eq=False)
class BatchMapAsyncStep(Step):
    kind = "batch_map_async"
    batch_size: int = 0
    max_in_flight: int = 2
    preserve_order: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("batch_size", self.batch_size)
        check_positive("max_in_flight", self.max_in_flight)

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        label, shard = self.label, ctx.shard_id
        window = _Window(self, shard, self.max_in_flight, self.preserve_order)
        fn: Callable[..., Any] | None = None

        async def one(batch: list[Row]) -> list[Row]:
            assert fn is not None  # resolved before the first call is submitted
            try:
                return rows_from_iterable(await maybe_await(fn(batch)), label, shard)
            except Exception as exc:
                window.fail(exc)
                raise

        batches = aiter(batches_of(blocks, self.batch_size))
        exhausted = False

        async def fill() -> None:
            """Submit batches until ``max_in_flight`` are in flight or the input ends, and
            let them start, so the window stays full while downstream takes the results."""
            nonlocal fn, exhausted
            while not exhausted and len(window) < window.limit:
                try:
                    batch = await anext(batches)
                except StopAsyncIteration:
                    exhausted = True
                    break
                if fn is None:
                    fn = ctx.callback(self)
                window.submit(one(batch))
            await asyncio.sleep(0)

        try:
            await fill()
            while len(window):
                out: list[Row] = []
                for rows in await window.take():
                    out.extend(rows)
                await fill()
                if out:
                    yield out
        finally:
            await window.cancel()

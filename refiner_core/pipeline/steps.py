"""Row transforms. Each step turns an async stream of row blocks into another."""

from __future__ import annotations

import asyncio
import collections
import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..datatype import fields_from_dtypes
from ..errors import CallbackResultError, StepError
from ..row import Row
from ..validation import check_positive
from .callbacks import merge_map_result, rows_from_iterable, step_label

Blocks = AsyncIterator[list[Row]]


class StepContext(Protocol):
    """What a step sees of the run it is part of."""

    @property
    def shard_id(self) -> str | None:
        """The shard whose rows flow through the step."""
        ...

    def callback(self, step: Step) -> Callable[..., Any]:
        """The step's callback in this worker: its ``fn``, or what its factory built."""
        ...


def _check_callable(kind: str, fn: Any, factory: Any, *, allow_factory: bool = True) -> None:
    if not allow_factory:
        if not callable(fn):
            raise TypeError(f"{kind} needs a callable, got {fn!r}")
        return
    if (fn is None) == (factory is None):
        raise ValueError(
            f"{kind} takes exactly one of fn or factory= (got {'both' if fn else 'neither'}); "
            "pass a callback, or a zero-argument factory that builds one per worker"
        )
    target = fn if fn is not None else factory
    if not callable(target):
        raise TypeError(
            f"{kind}: {'fn' if fn is not None else 'factory'} must be callable, got {target!r}"
        )


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass(eq=False)
class Step:
    """A transform; ``index`` is its position in the pipeline, set when it is appended."""

    kind = "step"
    fn: Callable[..., Any] | None = None
    factory: Callable[[], Any] | None = None
    dtypes: dict[str, Any] | None = None
    index: int = -1
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        self.fields = fields_from_dtypes(self.dtypes)

    @property
    def label(self) -> str:
        return step_label(self.index, self.kind)

    @property
    def plain_fn(self) -> Callable[..., Any]:
        """The callback of a step kind that takes no factory (``make_step`` checked it)."""
        assert self.fn is not None, f"{self.label} was built without a callback"
        return self.fn

    def fail(self, exc: BaseException, shard_id: str | None) -> StepError:
        error = StepError(
            f"{self.label} failed on shard {shard_id}: {type(exc).__name__}: {exc}",
            step_index=self.index,
            step_kind=self.kind,
            shard_id=shard_id,
        )
        error.__cause__ = exc
        return error

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:  # pragma: no cover - interface
        raise NotImplementedError
        yield


@dataclass(eq=False)
class MapStep(Step):
    kind = "map"

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        fn, label, shard = self.plain_fn, self.label, ctx.shard_id
        async for block in blocks:
            out = []
            for row in block:
                try:
                    result = fn(row)
                except Exception as exc:
                    raise self.fail(exc, shard) from exc
                out.append(merge_map_result(row, result, label, shard))
            yield out


@dataclass(eq=False)
class FilterStep(Step):
    kind = "filter"

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        fn, shard = self.plain_fn, ctx.shard_id
        async for block in blocks:
            try:
                out = [row for row in block if fn(row)]
            except Exception as exc:
                raise self.fail(exc, shard) from exc
            if out:
                yield out


@dataclass(eq=False)
class FlatMapStep(Step):
    kind = "flat_map"

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        fn, label, shard = self.plain_fn, self.label, ctx.shard_id
        async for block in blocks:
            out: list[Row] = []
            for row in block:
                try:
                    result = fn(row)
                    rows = rows_from_iterable(result, label, shard)
                except CallbackResultError:
                    raise
                except Exception as exc:
                    raise self.fail(exc, shard) from exc
                out.extend(rows)
            if out:
                yield out


async def _batches(blocks: Blocks, size: int) -> AsyncIterator[list[Row]]:
    """Regroup a block stream into batches of exactly ``size`` rows (the last may be short)."""
    pending: list[Row] = []
    async for block in blocks:
        pending.extend(block)
        start = 0
        while len(pending) - start >= size:
            yield pending[start : start + size]
            start += size
        del pending[:start]
    if pending:
        yield pending


@dataclass(eq=False)
class BatchMapStep(Step):
    kind = "batch_map"
    batch_size: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("batch_size", self.batch_size)

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        label, shard = self.label, ctx.shard_id
        fn: Callable[..., Any] | None = None
        async for batch in _batches(blocks, self.batch_size):
            if fn is None:
                fn = ctx.callback(self)
            try:
                result = await _maybe_await(fn(batch))
                rows = rows_from_iterable(result, label, shard)
            except CallbackResultError:
                raise
            except Exception as exc:
                raise self.fail(exc, shard) from exc
            if rows:
                yield rows


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
                return rows_from_iterable(await _maybe_await(fn(batch)), label, shard)
            except Exception as exc:
                window.fail(exc)
                raise

        batches = aiter(_batches(blocks, self.batch_size))
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


def make_step(kind: str, fn: Any = None, *, factory: Any = None, **options: Any) -> Step:
    """Validate arguments and build a step; errors surface when the pipeline is built."""
    classes = {
        "map": MapStep,
        "filter": FilterStep,
        "flat_map": FlatMapStep,
        "batch_map": BatchMapStep,
        "map_async": MapAsyncStep,
        "batch_map_async": BatchMapAsyncStep,
    }
    if kind in ("map", "filter", "flat_map"):
        _check_callable(kind, fn, None, allow_factory=False)
    else:
        _check_callable(kind, fn, factory)
    return classes[kind](fn=fn, factory=factory, **options)

"""The immutable pipeline builder: a source, its steps and block limits."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..datatype import asset_of
from ..execution.declared import check_against_source
from ..execution.watchdog import DEFAULT_PROGRESS_TIMEOUT_S
from ..io.ownership import DEFAULT_STALE_AFTER_S
from ..row import Row
from ..sinks.parquet import DEFAULT_ROW_GROUP_BYTES, DEFAULT_ROW_GROUP_ROWS
from ..sources.base import Shard, check_shard_ids
from ..sources.row_ranges import ShardHint
from ..validation import check_positive
from ..vocabulary import Format, LanceMode
from .step_factory import make_step
from .steps import Step

if TYPE_CHECKING:  # sequence.py builds on this module
    from .sequence import PipelineSequence


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A lazy description of rows: nothing runs until a run method is called.

    Every method returns a new pipeline; writers return a :class:`PipelineSequence`
    whose first stage writes and whose later stages finalize the output.

    Example:
        >>> import refiner_core as mdr
        >>> p = mdr.from_items([{"n": 1}, {"n": 2}, {"n": 3}]).map(lambda r: {"double": r.n * 2})
        >>> [r.double for r in p.filter(lambda r: r.n > 1).iter_rows()]
        [4, 6]
    """

    source: Any
    steps: tuple[Step, ...] = ()
    max_block_rows: int | None = None
    max_vectorized_block_bytes: int | None = None

    def _with_step(self, kind: str, fn: Any = None, **options: Any) -> Pipeline:
        step = make_step(kind, fn, **options)
        step.index = len(self.steps)
        return dataclasses.replace(self, steps=(*self.steps, step))

    # transforms -------------------------------------------------------------
    def map(self, fn: Callable[[Row], Any], *, dtypes: dict[str, Any] | None = None) -> Pipeline:
        """Apply ``fn`` to each row: a returned Row replaces it, a dict is merged into it."""
        return self._with_step("map", fn, dtypes=dtypes)

    def filter(self, predicate: Callable[[Row], bool]) -> Pipeline:
        """Keep the rows for which ``predicate`` is true."""
        return self._with_step("filter", predicate)

    def flat_map(
        self, fn: Callable[[Row], Any], *, dtypes: dict[str, Any] | None = None
    ) -> Pipeline:
        """Replace each row with the rows or dicts ``fn`` returns (none drops it)."""
        return self._with_step("flat_map", fn, dtypes=dtypes)

    def map_async(
        self,
        fn: Callable[[Row], Any] | None = None,
        *,
        factory: Callable[[], Any] | None = None,
        max_in_flight: int = 16,
        preserve_order: bool = True,
        dtypes: dict[str, Any] | None = None,
    ) -> Pipeline:
        """Run an async (or sync) callback per row with at most ``max_in_flight`` pending calls."""
        return self._with_step(
            "map_async",
            fn,
            factory=factory,
            max_in_flight=max_in_flight,
            preserve_order=preserve_order,
            dtypes=dtypes,
        )

    def batch_map(
        self,
        fn: Callable[[list[Row]], Any] | None = None,
        *,
        factory: Callable[[], Any] | None = None,
        batch_size: int,
        dtypes: dict[str, Any] | None = None,
    ) -> Pipeline:
        """Call ``fn`` on lists of exactly ``batch_size`` rows (the last may be shorter)."""
        return self._with_step(
            "batch_map", fn, factory=factory, batch_size=batch_size, dtypes=dtypes
        )

    def batch_map_async(
        self,
        fn: Callable[[list[Row]], Any] | None = None,
        *,
        factory: Callable[[], Any] | None = None,
        batch_size: int,
        max_in_flight: int = 2,
        preserve_order: bool = True,
        dtypes: dict[str, Any] | None = None,
    ) -> Pipeline:
        """Like :meth:`batch_map`, with up to ``max_in_flight`` batches pending at once."""
        return self._with_step(
            "batch_map_async",
            fn,
            factory=factory,
            batch_size=batch_size,
            max_in_flight=max_in_flight,
            preserve_order=preserve_order,
            dtypes=dtypes,
        )

    def with_max_block_rows(self, n: int) -> Pipeline:
        """Cap every block (source and transformed) at ``n`` rows before it reaches the sink."""
        check_positive("max_block_rows", n)
        return dataclasses.replace(self, max_block_rows=n)

    def with_max_vectorized_block_bytes(self, n: int) -> Pipeline:
        """Cap Arrow blocks from sources and vectorized operations at about ``n`` bytes
        (64 MiB by default). Sources also read about ``n`` bytes at a time (Parquet and
        Lance judge it from file metadata, JSONL ends a row block there), so wide rows
        such as inline images never make a read of thousands of them."""
        check_positive("max_vectorized_block_bytes", n)
        return dataclasses.replace(self, max_vectorized_block_bytes=n)

    # schema -------------------------------------------------------------------
    def declared_fields(self) -> dict[str, pa.Field]:
        """Columns whose types were declared with ``dtypes=`` (later declarations win)."""
        fields = dict(getattr(self.source, "fields", {}) or {})
        for step in self.steps:
            fields.update(step.fields)
        return fields

    def plan(self, *, workers: int = 1) -> list[Shard]:
        """List this pipeline's shards (reads only metadata), for ``workers`` processes
        sharing them: rows that point at media (asset columns) are cut into enough
        shards to keep every worker busy. Their ids are checked here, before anything
        is written, and so are ``dtypes=`` entries when the source's columns are all
        the rows can have (see :mod:`refiner_core.execution.declared`)."""
        media = any(asset_of(f) is not None for f in self.declared_fields().values())
        hint = ShardHint(workers=workers, media=media)
        # a source written before plans took a hint has plan(self)
        takes_hint = bool(inspect.signature(self.source.plan).parameters)
        shards = self.source.plan(hint) if takes_hint else self.source.plan()
        shards = check_shard_ids(list(shards), source=self.source.name)
        check_against_source(self)
        return shards

    # writers ----------------------------------------------------------------
    def write(self, format: Format, output: str, **options: Any) -> PipelineSequence:
        """Write with the sink registered for ``format`` (parquet, jsonl, lance)."""
        from ..sinks import make_sink
        from .sequence import PipelineSequence

        sink = make_sink(format, output, **options)
        return PipelineSequence.for_sink(self, sink)

    def write_parquet(
        self,
        output: str,
        *,
        assets: Any = None,
        compression: str = "zstd",
        row_group_size: int = DEFAULT_ROW_GROUP_ROWS,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        filename_template: str | None = None,
        storage_options: dict[str, Any] | None = None,
        **legacy: Any,
    ) -> PipelineSequence:
        """Write Parquet files (one per shard attempt) under ``output``; see ``assets=``.

        Blocks are gathered into row groups of ``row_group_size`` rows, or fewer where
        a group would pass ``row_group_bytes`` of Arrow data.
        """
        return self.write(
            "parquet",
            output,
            assets=assets,
            compression=compression,
            row_group_size=row_group_size,
            row_group_bytes=row_group_bytes,
            filename_template=filename_template,
            storage_options=storage_options,
            **legacy,
        )

    def write_jsonl(
        self,
        output: str,
        *,
        assets: Any = None,
        filename_template: str | None = None,
        storage_options: dict[str, Any] | None = None,
        **legacy: Any,
    ) -> PipelineSequence:
        """Write JSON Lines files (one per shard attempt) under ``output``."""
        return self.write(
            "jsonl",
            output,
            assets=assets,
            filename_template=filename_template,
            storage_options=storage_options,
            **legacy,
        )

    def write_lance(
        self,
        output: str,
        *,
        assets: Any = None,
        mode: LanceMode = "create",
        storage_options: dict[str, Any] | None = None,
        **legacy: Any,
    ) -> PipelineSequence:
        """Write a Lance dataset; fragments are committed once by the finalization stage."""
        return self.write(
            "lance", output, assets=assets, mode=mode, storage_options=storage_options, **legacy
        )

    def write_lerobot(
        self,
        output: str,
        *,
        fps: float,
        robot_type: str | None = None,
        video_files_size_in_mb: float = 200,
        data_files_size_in_mb: float = 100,
        chunks_size: int = 1000,
        storage_options: dict[str, Any] | None = None,
        clip_storage_options: dict[str, Any] | None = None,
        recompute_stats: bool = False,
    ) -> PipelineSequence:
        """Write a LeRobot v3.0 dataset from episode rows (one row per episode: ``tasks``,
        a ``video_clip`` per camera, frame data as per-frame lists) or from frame rows
        like ``read_lerobot(root)``'s (consecutive rows of one ``episode_index``); see
        :class:`refiner_core.sinks.lerobot.LeRobotSink`. ``clip_storage_options`` reach
        the clips' videos. A clip copied unchanged keeps the image statistics its row
        carries (``stats/<camera>/...``); ``recompute_stats=True`` decodes a sample instead."""
        # Not one of the table formats of write(format, ...): it takes fps and writes meta/
        from ..sinks.lerobot import LeRobotSink
        from .sequence import PipelineSequence

        sink = LeRobotSink(
            output,
            fps=fps,
            robot_type=robot_type,
            video_files_size_in_mb=video_files_size_in_mb,
            data_files_size_in_mb=data_files_size_in_mb,
            chunks_size=chunks_size,
            storage_options=storage_options,
            clip_storage_options=clip_storage_options,
            recompute_stats=recompute_stats,
        )
        return PipelineSequence.for_sink(self, sink)

    # running ----------------------------------------------------------------
    def iter_rows(self) -> Generator[Row, None, None]:
        """Run in this process and yield rows (no sink; callbacks closed at the end, or
        when the generator is closed early)."""
        from ..execution.inprocess import iter_rows

        yield from iter_rows(self)

    def take(self, n: int) -> list[Row]:
        """The first ``n`` rows, stopping the run as soon as they are there."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"take(n) needs a non-negative integer, got {n!r}")
        rows: list[Row] = []
        if n == 0:
            return rows
        iterator = self.iter_rows()
        try:
            for row in iterator:
                rows.append(row)
                if len(rows) >= n:
                    break
        finally:
            iterator.close()
        return rows

    def materialize(self) -> list[Row]:
        """Run in this process and return every row."""
        return list(self.iter_rows())

    def launch_local(
        self,
        *,
        name: str | None = None,
        num_workers: int = 1,
        rundir: str | None = None,
        start_method: str | None = None,
        fresh: bool = False,
        owner_stale_after_s: float = DEFAULT_STALE_AFTER_S,
        progress_timeout_s: float | None = DEFAULT_PROGRESS_TIMEOUT_S,
    ):
        """Run with worker processes; see :meth:`PipelineSequence.launch_local`."""
        from .sequence import PipelineSequence

        return PipelineSequence.of(self).launch_local(
            name=name,
            num_workers=num_workers,
            rundir=rundir,
            start_method=start_method,
            fresh=fresh,
            owner_stale_after_s=owner_stale_after_s,
            progress_timeout_s=progress_timeout_s,
        )

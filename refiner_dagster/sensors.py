"""A sensor that requests a reprocessing run when source files appear or change.

:func:`build_source_sensor` watches a local folder or any fsspec URL (an S3 prefix
with ``storage_options``) and turns every new or changed file into one
:class:`dagster.RunRequest`. Each file gets a *content version*, ``s<size>-m<mtime_us>``
for local files and ``etag-<ETag>`` for S3 objects, and the run key is
``<relative path>@<version>``: an unchanged file never triggers twice, a changed
file always does.

The cursor is small JSON that does not grow with the folder: a modification-time
*watermark* (``mark``) and the versions of the files modified within
``lookback_seconds`` of it (``recent``). Each tick lists the folder once and requests,
oldest modification first, every file modified after ``mark - lookback_seconds``
whose version is not in ``recent``, up to ``max_files_per_tick``; the rest wait for
the next tick, so a large drop never produces an oversized tick and no file starves.
Files older than the lookback window are taken as processed: a file copied in with
an old modification time (``cp -p``) is not seen, touch it. Files on a store that
reports no modification time are always kept in ``recent``.

With ``partitions_def`` each file is a dynamic partition keyed by its relative path;
the asset finds its file with :func:`partition_source_url`, which also works when the
partition is re-materialized from the UI (no sensor tags on that run).

With ``partition_fn`` each file maps to the partition it belongs to (a day, a robot),
so the sensor drives an asset partitioned any way: the files of one partition found in
the same tick make one run of that partition, dynamic partitions are added as they
appear, and a file whose key is not a partition of ``partitions_def`` is skipped with a
warning naming it::

    DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01")
    day_sensor = build_source_sensor(
        name="days", url="s3://bucket/drops", target=[days], partitions_def=DAILY,
        partition_fn=lambda f: f.path.split("/")[0],  # drops/<YYYY-MM-DD>/<file>
    )

Per file::

    DROPS = dg.DynamicPartitionsDefinition(name="drops")

    @dg.asset(partitions_def=DROPS, io_manager_key="refiner")
    def episodes(context: dg.AssetExecutionContext) -> mdr.Pipeline:
        url = partition_source_url("s3://bucket/drops", context.partition_key)
        return mdr.read_parquet(url)

    drops_sensor = build_source_sensor(
        name="drops", url="s3://bucket/drops", target=[episodes], partitions_def=DROPS,
        s3_resource_key="s3",  # credentials and endpoint of the S3Resource bound as "s3"
    )

Example:
    >>> import tempfile, dagster as dg
    >>> from refiner_dagster.sensors import build_source_sensor
    >>> folder = tempfile.mkdtemp()
    >>> @dg.asset
    ... def episodes() -> None: ...
    >>> sensor = build_source_sensor(name="drops", url=folder, target=[episodes])
    >>> open(f"{folder}/a.parquet", "wb").write(b"PAR1")
    4
    >>> result = sensor(dg.build_sensor_context())
    >>> [r.tags["refiner/source_path"] for r in result.run_requests]
    ['a.parquet']
    >>> sensor(dg.build_sensor_context(cursor=result.cursor)).run_requests
    []
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg

from refiner_core.io import full_url

from .ordered_cursor import ORDERED_CURSOR_VERSION, OrderedCursor, run_pass
from .ordered_listing import iter_files_after
from .sensor_partitions import files_run_key, partition_problem
from .source_files import (
    SourceCursor,
    SourceFile,
    content_version,
    list_source_files,
    modified_at,
    next_source_cursor,
)
from .storage import s3_storage_options

if TYPE_CHECKING:
    pass

DEFAULT_LOOKBACK_SECONDS = 600.0
DEFAULT_FULL_SCAN_EVERY = 120
SOURCE_PATH_TAG = "refiner/source_path"
SOURCE_URL_TAG = "refiner/source_url"
SOURCE_VERSION_TAG = "refiner/source_version"
SOURCE_SIZE_TAG = "refiner/source_size"
SOURCE_FILES_TAG = "refiner/source_files"

__all__ = [
    "SOURCE_FILES_TAG",
    "SOURCE_PATH_TAG",
    "SOURCE_SIZE_TAG",
    "SOURCE_URL_TAG",
    "SOURCE_VERSION_TAG",
    "SourceFile",
    "SourceCursor",
    "build_source_sensor",
    "list_source_files",
    "partition_source_url",
]


def partition_source_url(url: str, partition_key: str) -> str:
    """The source file of a per-file partition: ``url`` joined with the key (its relative path).

    >>> partition_source_url("s3://bucket/drops/", "2024/a.parquet")
    's3://bucket/drops/2024/a.parquet'
    >>> partition_source_url("/data/drops", "a.parquet")
    '/data/drops/a.parquet'
    """
    key = str(partition_key)
    if not key or key.startswith("/") or ".." in key.split("/") or "://" in key:
        raise ValueError(
            f"partition key {partition_key!r} is not a relative path under {url}; per-file "
            "partitions are the relative paths build_source_sensor adds"
        )
    return url.rstrip("/") + "/" + key


def _order(source: SourceFile) -> tuple[float, str]:
    return (source.modified if source.modified is not None else float("inf"), source.path)


def build_source_sensor(
    *,
    name: str,
    url: str,
    target: Any = None,
    job: Any = None,
    pattern: str = "*",
    storage_options: Mapping[str, Any] | None = None,
    s3_resource_key: str | None = None,
    max_files_per_tick: int = 100,
    min_age_seconds: float = 0.0,
    lookback_seconds: float = DEFAULT_LOOKBACK_SECONDS,
    names_ordered: bool = False,
    full_scan_every: int = DEFAULT_FULL_SCAN_EVERY,
    partitions_def: dg.PartitionsDefinition | None = None,
    partition_fn: Callable[[SourceFile], str | None] | None = None,
    run_config_fn: Callable[[SourceFile], Mapping[str, Any]] | None = None,
    tags: Mapping[str, str] | None = None,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    description: str | None = None,
) -> dg.SensorDefinition:
    """Build a sensor that requests one run per new or changed file under ``url``.

    Args:
        name: Sensor name.
        url: Watched folder: a local path or an fsspec URL such as ``s3://bucket/prefix``.
        target: What each run materializes: assets, an asset selection or a job.
        job: Alternative to ``target`` for a job definition.
        pattern: ``fnmatch`` pattern on the relative path (``*`` crosses folders).
        storage_options: fsspec options, e.g. ``key``/``secret``/``client_kwargs`` for S3.
        s3_resource_key: The resource key of a dagster-aws ``S3Resource`` whose
            credentials, region and endpoint reach ``url`` (a resource the sensor
            requires; ``storage_options`` are applied over it).
        max_files_per_tick: At most this many run requests per tick; the next tick
            continues where this one stopped.
        min_age_seconds: Skip files modified more recently than this (still being written).
        lookback_seconds: How far before the watermark modifications are still looked
            for (uploads that finish after newer ones, clock skew); kept above
            ``min_age_seconds``.
        names_ordered: New files get names that sort after the files before them
            (timestamps, sequence numbers, date folders such as ``2024/06/01/``). Each
            tick then lists only the names after the last one seen (S3 ``StartAfter``,
            a walk that skips folders already passed) and the cursor stays a few keys
            long; a file that lands under a lower name, or an overwritten file, is
            found by the next full scan (see ``full_scan_every``).
        full_scan_every: With ``names_ordered``, every this many ticks the whole
            folder is listed again to find files that landed under a name lower than
            the last one seen (at most this many ticks late: 120 ticks of 30 s is an hour).
        partitions_def: If given, each file's relative path becomes a dynamic partition
            (added in the same tick) and its run targets that partition. With
            ``partition_fn``, any partitions definition (daily, static, dynamic).
        partition_fn: Maps a file to the key of the partition it belongs to (``None``:
            to none, the file is skipped). The files of one partition found in one tick
            make one run of it, tagged with the newest file and ``refiner/source_files``
            (their count); keys of a dynamic ``partitions_def`` are added in the same tick.
        run_config_fn: Builds each run's config from its :class:`SourceFile` (the newest
            one of the run's files).
        tags: Extra tags on every run (the ``refiner/source_*`` tags are always set).
        minimum_interval_seconds: Time between ticks.
        default_status: Whether the sensor starts running when the code location loads.
        description: Shown in the UI.
    """
    if isinstance(max_files_per_tick, bool) or not isinstance(max_files_per_tick, int):
        raise ValueError(
            f"max_files_per_tick must be a positive integer, got {max_files_per_tick!r}"
        )
    if max_files_per_tick <= 0:
        raise ValueError(
            f"max_files_per_tick must be a positive integer, got {max_files_per_tick!r}"
        )
    if (target is None) == (job is None):
        raise ValueError(f"sensor {name!r}: pass exactly one of target= or job=")
    dynamic = isinstance(partitions_def, dg.DynamicPartitionsDefinition)
    if partitions_def is not None and not dynamic and partition_fn is None:
        raise ValueError(
            f"sensor {name!r}: partitions_def must be a dg.DynamicPartitionsDefinition with a "
            f"name (one partition per file), got {type(partitions_def).__name__}; to map files "
            "onto these partitions pass partition_fn=, e.g. lambda f: f.path.split('/')[0]"
        )
    if partition_fn is not None and not callable(partition_fn):
        raise ValueError(f"sensor {name!r}: partition_fn must be a function, got {partition_fn!r}")
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition) and not partitions_def.name:
        raise ValueError(f"sensor {name!r}: the DynamicPartitionsDefinition needs a name=")
    options = dict(storage_options or {})
    extra_tags = dict(tags or {})
    if isinstance(full_scan_every, bool) or not isinstance(full_scan_every, int):
        raise ValueError(f"full_scan_every must be a positive integer, got {full_scan_every!r}")
    if full_scan_every <= 0:
        raise ValueError(f"full_scan_every must be a positive integer, got {full_scan_every!r}")
    lookback = max(float(lookback_seconds), float(min_age_seconds) * 2 + 60)

    def evaluate(context: dg.SensorEvaluationContext, **resources: Any) -> dg.SensorResult:
        fs_options = dict(options)
        if s3_resource_key is not None:
            s3 = resources.get(s3_resource_key) or getattr(context.resources, s3_resource_key)
            fs_options = {**s3_storage_options(s3), **options}
        if names_ordered:
            return _ordered_tick(context, fs_options)
        cursor = SourceCursor.parse(context.cursor)
        files = list_source_files(
            url, pattern=pattern, storage_options=fs_options, min_age_seconds=min_age_seconds
        )
        floor = cursor.mark - lookback if cursor.mark is not None else None
        # Files that disappeared are forgotten, so a file put back is processed again.
        seen = {f.path: cursor.recent[f.path] for f in files if f.path in cursor.recent}
        requested: list[SourceFile] = []
        truncated = False
        for source in sorted(files, key=_order):
            if seen.get(source.path) == source.version:
                continue
            if floor is not None and source.modified is not None and source.modified < floor:
                continue  # before the lookback window: requested by an earlier tick
            if _unusable_partition(context, source):
                # Logged once per version; a bad name must not fail every tick.
                seen[source.path] = source.version
                continue
            if len(requested) >= max_files_per_tick:
                truncated = True
                break
            requested.append(source)
        known = {p for p in cursor.recent if p in seen}
        new_keys = [f.path for f in requested if f.path not in known]
        for source in requested:
            seen[source.path] = source.version
        next_cursor = next_source_cursor(cursor, files, seen, requested, truncated, lookback)
        return _result(context, requested, new_keys, truncated, next_cursor.dumps())

    def _ordered_tick(context: dg.SensorEvaluationContext, fs_options: dict) -> dg.SensorResult:
        from fsspec.core import url_to_fs

        cursor = _parse_ordered(context.cursor)
        fs, _ = url_to_fs(url, **fs_options)

        def make_source(relpath: str, info: dict[str, Any]) -> SourceFile | None:
            if not fnmatch.fnmatch(relpath, pattern):
                return None
            source = SourceFile(
                path=relpath,
                url=full_url(fs, info["path"]),
                size=int(info.get("size") or 0),
                version=content_version(fs, info["path"], info),
                modified=modified_at(info),
            )
            return None if _unusable_partition(context, source) else source

        result = run_pass(
            cursor,
            list_after=lambda after: iter_files_after(url, after, storage_options=fs_options),
            make_source=make_source,
            max_files=max_files_per_tick,
            full_scan_every=full_scan_every,
            lookback=lookback,
            min_age=float(min_age_seconds),
            now=time.time(),
        )
        if result.full_scan:
            context.log.info(f"full scan of {url} (every {full_scan_every} ticks)")
        requested = result.requested
        # Adding a partition that exists is a no-op, so every requested path is added.
        new_keys = [f.path for f in requested]
        return _result(context, requested, new_keys, result.truncated, result.cursor.dumps())

    def _key_of(source: SourceFile) -> str | None:
        if partition_fn is not None:
            return partition_fn(source)
        return source.path if partitions_def is not None else None

    def _unusable_partition(context: dg.SensorEvaluationContext, source: SourceFile) -> bool:
        if partitions_def is None and partition_fn is None:
            return False
        key = _key_of(source)
        if key is None:
            context.log.info(f"skipping {source.url}: partition_fn maps it to no partition")
            return True
        problem = partition_problem(key, partitions_def, mapped=partition_fn is not None)
        if problem is not None:
            # Logged once per version; a bad name must not fail every tick.
            context.log.warning(f"skipping {source.url}: {problem}")
            return True
        return False

    def _result(
        context: dg.SensorEvaluationContext,
        requested: list[SourceFile],
        new_keys: list[str],
        truncated: bool,
        next_cursor: str,
    ) -> dg.SensorResult:
        if partition_fn is not None:
            by_key: dict[str | None, list[SourceFile]] = {}
            for source in requested:
                by_key.setdefault(_key_of(source), []).append(source)
            groups = list(by_key.items())
            new_keys = [str(k) for k in by_key] if dynamic else []
        else:
            groups = [(_key_of(source), [source]) for source in requested]
        run_requests = [_run_request(key, files) for key, files in groups]
        if requested:
            context.log.info(
                f"{len(requested)} new or changed file(s) under {url}"
                + (" (more next tick)" if truncated else "")
            )
        partition_requests = (
            [partitions_def.build_add_request(new_keys)]
            if isinstance(partitions_def, dg.DynamicPartitionsDefinition) and new_keys
            else []
        )
        return dg.SensorResult(
            run_requests=run_requests,
            dynamic_partitions_requests=partition_requests or None,
            cursor=next_cursor,
            skip_reason=None
            if run_requests
            else dg.SkipReason(f"no new or changed files under {url}"),
        )

    def _run_request(key: str | None, files: list[SourceFile]) -> dg.RunRequest:
        """One run for ``files`` (oldest first) of partition ``key``."""
        newest = files[-1]
        run_tags = {
            **extra_tags,
            SOURCE_PATH_TAG: newest.path,
            SOURCE_URL_TAG: newest.url,
            SOURCE_VERSION_TAG: newest.version,
            SOURCE_SIZE_TAG: str(newest.size),
        }
        run_key = newest.run_key
        if partition_fn is not None:
            run_tags[SOURCE_FILES_TAG] = str(len(files))
            if len(files) > 1:
                run_key = files_run_key(str(key), [f.run_key for f in files])
        return dg.RunRequest(
            run_key=run_key,
            run_config=dict(run_config_fn(newest)) if run_config_fn else None,
            tags=run_tags,
            partition_key=key,
        )

    return dg.SensorDefinition(
        name=name,
        evaluation_fn=evaluate,
        required_resource_keys={s3_resource_key} if s3_resource_key else None,
        target=target,
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=description
        or f"Requests a run for every new or changed file matching {pattern!r} under {url}.",
    )


def _parse_ordered(raw: str | None) -> OrderedCursor:
    """The cursor of an ordered sensor; a modification-time cursor (v1, v2) is carried over."""
    if raw:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and data.get("v") == ORDERED_CURSOR_VERSION:
            return OrderedCursor.from_json(data)
    return OrderedCursor.from_watermark(SourceCursor.parse(raw).mark)

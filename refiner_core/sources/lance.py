"""Lance source: one pinned dataset version, sharded by groups of whole fragments."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa

from ..datatype import fields_from_dtypes
from ..io.datafile import full_url, resolve
from ..io.versions import Wanted, check_version, version_folder
from ..lance.blobs import blob_columns, mark_blob_columns
from ..lance.dataset import dataset_url, lance_storage_options, open_dataset, probe
from ..lance.isolation import call_isolated, iter_isolated
from ..validation import check_positive
from .arrow_cast import apply_fields, projected_schema
from .base import (
    DEFAULT_TARGET_SHARD_BYTES,
    Shard,
    check_columns,
    check_num_shards,
    group_runs,
    log_short_plan,
    make_shards,
)
from .row_ranges import RowSpan, ShardHint, split_pieces, wanted_shards

# Lance reads this many batches ahead by default; wide rows get fewer, so that the
# batches read ahead stay within READAHEAD_BYTES.
LANCE_READAHEAD = 16
READAHEAD_BYTES = 128 * 1024 * 1024


def fragment_batching(metadata: Any, batch_rows: int, batch_bytes: int | None) -> tuple[int, int]:
    """``(rows per batch, batches read ahead)`` for a fragment: at most ``batch_rows``
    rows and about ``batch_bytes`` bytes per batch, judged by the size of its data files
    (all columns: Lance does not say how much of a file each column takes, so reading a
    few narrow columns of a wide table gets smaller batches than it needs).

    Example:
        >>> from types import SimpleNamespace as Meta
        >>> images = Meta(physical_rows=50_000, files=[Meta(file_size_bytes=50_000 * 20_480)])
        >>> fragment_batching(images, 65_536, 64 << 20)
        (3276, 2)
        >>> fragment_batching(Meta(physical_rows=10, files=[Meta(file_size_bytes=None)]), 1024, 1)
        (1024, 16)
    """
    sizes = [f.file_size_bytes for f in metadata.files]
    rows = metadata.physical_rows
    if batch_bytes is None or not rows or not sizes or any(size is None for size in sizes):
        return batch_rows, LANCE_READAHEAD
    width = max(1.0, sum(sizes) / rows)
    batch = max(1, min(batch_rows, int(batch_bytes // width)))
    readahead = max(1, min(LANCE_READAHEAD, int(READAHEAD_BYTES // (batch * width))))
    return batch, readahead


class LanceSource:
    """Reads one version of a Lance dataset; a shard is a run of whole fragments, or
    a range of rows of one fragment when the plan wants more shards than there are
    fragments (``num_shards``, or rows pointing at media: see :class:`ShardHint`).

    The version is pinned when the stage plans (the latest one when ``version`` is
    ``None``) and travels in every shard, so all shards read the same snapshot even
    if the dataset is written to meanwhile. ``uri`` may be a versioned dataset folder
    (:mod:`refiner_core.io.versions`): the table read is then its published version's,
    or that of ``version="v-<id>"`` (or ``as_of=datetime``), chosen when the stage plans too. Blocks are Arrow tables of at most
    ``batch_rows`` rows and about ``batch_bytes`` bytes (:func:`fragment_batching`);
    field metadata (asset marks) comes back as written, and Lance blob columns as the
    bytes they hold (:mod:`refiner_core.lance.blobs`).

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> uri = tempfile.mkdtemp() + "/ds.lance"
        >>> _ = mdr.from_items([{"x": 1}, {"x": 2}]).write_lance(uri).launch_local()
        >>> [r.x for r in mdr.read_lance(uri).iter_rows()]
        [1, 2]
    """

    name = "read_lance"

    def __init__(
        self,
        uri: str,
        *,
        dtypes: dict[str, Any] | None = None,
        columns: list[str] | None = None,
        version: int | str | None = None,
        as_of: datetime | None = None,
        num_shards: int | None = None,
        target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        check_num_shards(num_shards)
        check_positive("target_shard_bytes", target_shard_bytes)
        self.dataset_version: Wanted = None
        if isinstance(version, str | datetime) or as_of is not None:
            self.dataset_version = check_version(
                version if isinstance(version, str | datetime) else None, "read_lance", as_of
            )
            version = None if isinstance(version, str | datetime) else version
            if version is not None:
                raise ValueError(
                    f"read_lance: both version={version!r} (a Lance table version) and "
                    f"as_of={as_of!r} were given; pass one of them"
                )
        elif version is not None:
            check_positive("version", version)
        check_columns(columns)
        self.url = dataset_url(uri, storage_options)
        self.fields = fields_from_dtypes(dtypes)
        self.columns = list(columns) if columns is not None else None
        self.version = version
        self.num_shards = num_shards
        self.target_shard_bytes = target_shard_bytes
        self.storage_options = storage_options
        self.lance_options = lance_storage_options(storage_options)
        self.pinned_version: int | None = None
        self._schema: pa.Schema | None = None

    def table_url(self) -> str:
        """The Lance dataset to read: ``uri``, or the chosen version of a dataset folder."""
        fs, path = resolve(self.url, self.storage_options)
        chosen = version_folder(fs, path, self.dataset_version, what="read_lance")
        return self.url if chosen is None else full_url(fs, chosen)

    def plan(self, hint: ShardHint | None = None) -> list[Shard]:
        url = self.table_url()
        try:
            info = call_isolated(probe, url, self.lance_options, self.version)
        except ValueError as exc:
            raise ValueError(
                f"read_lance: cannot open {url}: {exc}. Pass an existing version, "
                "or version=None for the latest"
            ) from exc
        if info is None:
            raise FileNotFoundError(
                f"read_lance: no Lance dataset at {url}; check the path, or write one "
                "with pipeline.write_lance(...)"
            )
        schema = info["schema"]
        if self.columns is not None:
            missing = [c for c in self.columns if c not in schema.names]
            if missing:
                raise ValueError(
                    f"read_lance: columns {missing} are not in {url} version "
                    f"{info['version']} (it has {schema.names})"
                )
        self.pinned_version = info["version"]
        self._schema = schema
        fragments = info["fragments"]
        # bytes when Lance knows them, else rows
        weights = [size if size > 0 else rows for _, rows, size in fragments]
        groups = group_runs(weights, target=self.target_shard_bytes, num_shards=self.num_shards)
        runs = [[RowSpan(i, 0, fragments[i][1]) for i in g] for g in groups]
        minimum = (hint or ShardHint()).min_shards(self.schema_hint())
        count = wanted_shards(self.num_shards, minimum, len(runs))
        if count is not None and any(rows for _, rows, _ in fragments):
            runs = split_pieces([rows for _, rows, _ in fragments], weights, count)
        total_rows = sum(rows for _, rows, _ in fragments)
        payloads = [
            (info["version"], tuple(self._span(fragments, span) for span in run), url)
            for run in runs
        ]
        log_short_plan("read_lance", self.num_shards, len(payloads), f"{total_rows} rows")
        return make_shards(payloads, source="read_lance")

    @staticmethod
    def _span(fragments: list[tuple[int, int, int]], span: RowSpan) -> tuple[int, int, int]:
        """``(fragment id, first row, stop row)``, rows counted within the fragment."""
        return (fragments[span.piece][0], span.start, span.stop)

    def schema_hint(self) -> pa.Schema | None:
        if self._schema is None:
            return None
        return projected_schema(self._schema, self.columns, self.fields)

    def _fragment_tables(
        self,
        url: str,
        version: int,
        spans: tuple[tuple[int, int, int], ...],
        batch_rows: int,
        batch_bytes: int | None,
    ):
        dataset = open_dataset(url, self.lance_options, version)
        blobs = blob_columns(dataset.schema, self.columns)
        options: dict[str, Any] = {}
        if blobs:
            # The bytes, not Lance's descriptors; blob files are not among the fragment's
            # data files, so only Lance can keep batches of them within batch_bytes.
            options["blob_handling"] = "all_binary"
            if batch_bytes is not None:
                options["batch_size_bytes"] = batch_bytes
        for fragment_id, start, stop in spans:
            fragment = dataset.get_fragment(fragment_id)
            if fragment is None:
                raise ValueError(
                    f"read_lance {url} version {version}: fragment {fragment_id} is gone; "
                    "the version was cleaned up while the run was reading it. Launch it again"
                )
            rows, readahead = fragment_batching(fragment.metadata, batch_rows, batch_bytes)
            for batch in fragment.to_batches(
                batch_size=rows,
                batch_readahead=readahead,
                columns=self.columns,
                offset=start,
                limit=stop - start,
                **options,
            ):
                if batch.num_rows:
                    yield mark_blob_columns(pa.Table.from_batches([batch]), blobs)

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[pa.Table]:
        version, spans, url = shard.payload
        where = f"read_lance {url} version {version}"
        for table in iter_isolated(
            self._fragment_tables, url, version, spans, batch_rows, batch_bytes
        ):
            yield apply_fields(table, self.fields, where=where)

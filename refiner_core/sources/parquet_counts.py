"""Row counts a Parquet file states about itself, checked before and after a read.

pyarrow reads as many rows of a row group as its footer says, even when its pages
hold more: a footer whose row-group count was cut short reads short without an
error. A read therefore compares three counts the file keeps independently: the
footer's total, the sum of its row groups, and, per row group, the value count of
each flat column chunk (one value, null or not, per row). Afterwards the rows that
came back are compared with the rows the footer promised.

Example:
    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buf = io.BytesIO()
    >>> pq.write_table(pa.table({"x": range(10)}), buf, row_group_size=4)
    >>> check_footer_counts(pq.ParquetFile(buf).metadata, "mem.parquet", [0, 1, 2])
"""

from __future__ import annotations

import pyarrow.parquet as pq

from ..errors import RefinerError

_FIX = (
    "The file is damaged or was written by a faulty writer: rewrite it from its source, "
    "or leave it out of the inputs"
)


class ShortReadError(RefinerError, ValueError):
    """A Parquet file's counts disagree, or a read returned fewer rows than promised.

    ``url``, ``row_group``, ``expected`` and ``found`` name the file, the row group
    (``None`` for the whole file) and the two counts.
    """

    def __init__(
        self, message: str, *, url: str, row_group: int | None, expected: int, found: int
    ) -> None:
        super().__init__(message)
        self.url = url
        self.row_group = row_group
        self.expected = expected
        self.found = found


def check_footer_counts(metadata: pq.FileMetaData, url: str, row_groups: list[int]) -> None:
    """Raise :class:`ShortReadError` unless the footer's counts agree for ``row_groups``."""
    groups_total = sum(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    if groups_total != metadata.num_rows:
        raise ShortReadError(
            f"read_parquet {url}: the footer says the file has {metadata.num_rows} rows but "
            f"its {metadata.num_row_groups} row group(s) add up to {groups_total}; reading it "
            f"would give {groups_total} rows. {_FIX}",
            url=url,
            row_group=None,
            expected=metadata.num_rows,
            found=groups_total,
        )
    flat = [
        i
        for i in range(metadata.num_columns)
        if metadata.schema.column(i).max_repetition_level == 0
    ]
    for index in row_groups:
        group = metadata.row_group(index)
        for column in flat:
            values = group.column(column).num_values
            if values != group.num_rows:
                name = metadata.schema.column(column).path
                raise ShortReadError(
                    f"read_parquet {url}: row group {index} says it has {group.num_rows} rows "
                    f"but its column {name!r} holds {values} values (one per row); reading "
                    f"it would give {group.num_rows} rows. {_FIX}",
                    url=url,
                    row_group=index,
                    expected=values,
                    found=group.num_rows,
                )


def check_rows_read(url: str, row_group: int, expected: int, found: int) -> None:
    """Raise :class:`ShortReadError` when a read from ``row_group`` on stopped at
    ``found`` rows of the ``expected``."""
    if found < expected:
        raise ShortReadError(
            f"read_parquet {url}: read {found} of the {expected} rows the footer promises "
            f"(the read ended in row group {row_group}). {_FIX}",
            url=url,
            row_group=row_group,
            expected=expected,
            found=found,
        )

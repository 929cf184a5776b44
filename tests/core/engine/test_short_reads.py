"""A Parquet file whose footer promises fewer rows than its pages hold fails its shard.

The bad files are real pyarrow files whose footer was edited in place: one Thrift
varint (a row count) replaced by a smaller one of the same length. pyarrow then
reads the smaller count without an error; refiner must not.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.sources.parquet_counts import ShortReadError

ROWS = 1000
CUT = 950


def _zigzag_varint(n: int) -> bytes:
    value, out = (n << 1) ^ (n >> 63), bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _write(path) -> None:
    table = pa.table({"i": pa.array(range(ROWS), pa.int64()), "s": [f"r{i}" for i in range(ROWS)]})
    pq.write_table(table, path, row_group_size=ROWS)


def _cut_counts(path, *, row_group: bool, file_total: bool) -> None:
    """Rewrite the footer's row-group and/or file row count from ROWS to CUT."""
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    footer = bytearray(data[start:-8])
    # an i64 field following the previous field: header byte 0x16, then the varint
    old, new = b"\x16" + _zigzag_varint(ROWS), b"\x16" + _zigzag_varint(CUT)
    assert len(old) == len(new)
    wanted = (CUT if file_total else ROWS, CUT if row_group else ROWS)

    def counts(footer: bytes) -> tuple[int, int, list[int]]:
        meta = pq.ParquetFile(pa.BufferReader(data[:start] + footer + data[-8:])).metadata
        values = [meta.row_group(0).column(c).num_values for c in range(meta.num_columns)]
        return meta.num_rows, meta.row_group(0).num_rows, values

    original = counts(bytes(footer))
    at = 0
    while (at := footer.find(old, at)) >= 0:
        edited = footer[:at] + new + footer[at + len(old) :]
        total, group, values = counts(bytes(edited))
        if values != original[2]:
            pass  # a column chunk's value count: left as written
        elif (file_total and total != original[0]) or (row_group and group != original[1]):
            footer = edited
        at += 1
    path.write_bytes(data[:start] + bytes(footer) + data[-8:])
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.row_group(0).num_rows) == wanted
    assert pq.read_table(path).num_rows == (CUT if row_group else ROWS)  # pyarrow reads short


@pytest.mark.parametrize("file_total", [False, True], ids=["group-count", "both-counts"])
def test_a_footer_that_undercounts_a_row_group_fails_naming_file_group_and_counts(
    tmp_path, file_total
):
    path = tmp_path / "index.parquet"
    _write(path)
    _cut_counts(path, row_group=True, file_total=file_total)
    with pytest.raises(ShortReadError) as caught:
        list(mdr.read_parquet(str(path)).iter_rows())
    message = str(caught.value)
    assert str(path) in message and str(CUT) in message and str(ROWS) in message
    assert caught.value.row_group == (0 if file_total else None)
    assert (caught.value.expected, caught.value.found) == (ROWS, CUT)


def test_a_launch_over_a_short_file_fails_and_publishes_nothing(tmp_path):
    path = tmp_path / "index.parquet"
    _write(path)
    _cut_counts(path, row_group=True, file_total=False)
    out = tmp_path / "out"
    with pytest.raises(Exception, match="950") as caught:
        mdr.read_parquet(str(path)).write_parquet(str(out)).launch_local(num_workers=1)
    assert str(path) in str(caught.value) or any(str(path) in n for n in caught.value.__notes__)
    assert not (out / "_refiner" / "summary.json").exists()


def test_healthy_files_with_nulls_and_lists_read_whole(tmp_path):
    path = tmp_path / "ok.parquet"
    table = pa.table(
        {
            "i": pa.array([1, None, 3] * 100, pa.int64()),
            "l": [[1, 2], [], None] * 100,
            "st": [{"a": 1}, None, {"a": None}] * 100,
        }
    )
    pq.write_table(table, path, row_group_size=70)
    assert len(list(mdr.read_parquet(str(path)).iter_rows())) == 300

"""Numpy arrays returned by callbacks: N-D arrays land as nested lists, 1-D as lists,
0-D as scalars, in Parquet and JSONL, with and without declared dtypes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

from .helpers import data_files


def with_arrays(row: mdr.Row) -> dict:
    i = row.i
    return {
        "i": i,
        # an action chunk whose length differs per row
        "actions": np.arange(2 * (i + 1), dtype=np.int64).reshape(i + 1, 2) + i,
        "image": np.full((2, 2, 3), i, dtype=np.uint8),
        "state": np.array([i, i + 0.5], dtype=np.float32),
        "reward": np.array(i / 2),
        "chunks": [np.eye(2, dtype=np.int64) * i, np.zeros((1, 2), dtype=np.int64)],
        "nested": {"pose": np.ones((2, 2), dtype=np.float64) * i},
        "mask": np.eye(2, dtype=bool) if i % 2 else None,
    }


def expected(i: int) -> dict:
    return {
        "i": i,
        "actions": [[2 * k + i, 2 * k + 1 + i] for k in range(i + 1)],
        "image": [[[i] * 3] * 2] * 2,
        "state": [float(i), i + 0.5],
        "reward": i / 2,
        "chunks": [[[i, 0], [0, i]], [[0, 0]]],
        "nested": {"pose": [[float(i)] * 2] * 2},
        "mask": [[True, False], [False, True]] if i % 2 else None,
    }


def pipeline(dtypes: dict | None = None) -> mdr.Pipeline:
    source = mdr.from_items([{"i": i} for i in range(5)], items_per_shard=3)
    return source.map(with_arrays, dtypes=dtypes)


def parquet_rows(out: Path) -> tuple[pa.Schema, list[dict]]:
    files = data_files(out)
    tables = [pq.read_table(p) for p in files]
    rows = sorted((r for t in tables for r in t.to_pylist()), key=lambda r: r["i"])
    return tables[0].schema, rows


def test_nd_arrays_become_nested_lists_in_parquet(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pipeline().write_parquet(str(out)).launch_local(num_workers=2)
    schema, rows = parquet_rows(out)
    assert rows == [expected(i) for i in range(5)]
    assert schema.field("actions").type == pa.list_(pa.list_(pa.int64()))
    assert schema.field("image").type == pa.list_(pa.list_(pa.list_(pa.uint8())))
    assert schema.field("state").type == pa.list_(pa.float32())
    assert schema.field("reward").type == pa.float64()
    assert schema.field("chunks").type == pa.list_(pa.list_(pa.list_(pa.int64())))
    assert schema.field("mask").type == pa.list_(pa.list_(pa.bool_()))


def test_nd_arrays_fit_declared_dtypes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    dtypes = {
        "actions": pa.list_(pa.list_(pa.int64())),
        "image": pa.list_(pa.list_(pa.list_(pa.uint8(), 3), 2), 2),
        "reward": mdr.datatype.float32(),
    }
    pipeline(dtypes).write_parquet(str(out)).launch_local(num_workers=2)
    schema, rows = parquet_rows(out)
    assert rows == [expected(i) for i in range(5)]
    assert schema.field("actions").type == dtypes["actions"]
    assert schema.field("image").type == dtypes["image"]
    assert schema.field("reward").type == pa.float32()


def test_nd_arrays_written_as_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pipeline().write_jsonl(str(out)).launch_local(num_workers=1)
    lines = [json.loads(line) for p in data_files(out, ".jsonl") for line in p.open()]
    assert sorted(lines, key=lambda r: r["i"]) == [expected(i) for i in range(5)]


def test_an_array_that_does_not_fit_the_declared_dtype_names_column_and_row(
    tmp_path: Path,
) -> None:
    source = mdr.from_items([{"i": 0}, {"i": 1}], items_per_shard=2)
    bad = source.map(
        lambda r: {"m": np.ones((2, 2)) if r.i == 0 else np.array([["a", "b"]])},
        dtypes={"m": pa.list_(pa.list_(pa.float64()))},
    )
    out = tmp_path / "out"
    with pytest.raises(
        mdr.StageFailed, match=r"column 'm': value array\(\[\['a', 'b'\]\].* row 1 "
    ):
        bad.write_parquet(str(out)).launch_local(num_workers=1)
    assert data_files(out) == []

"""What callbacks may return, and what happens to the rows."""

from __future__ import annotations

import asyncio

import pytest

import refiner_core as mdr


def items(n: int = 5, per_shard: int = 1000) -> mdr.Pipeline:
    return mdr.from_items([{"i": i, "keep": "x"} for i in range(n)], items_per_shard=per_shard)


def test_map_row_replaces_dict_merges():
    replaced = items(3).map(lambda r: mdr.Row({"only": r.i})).materialize()
    assert [r.to_dict() for r in replaced] == [{"only": 0}, {"only": 1}, {"only": 2}]
    merged = items(3).map(lambda r: {"i": r.i * 10, "new": True}).materialize()
    assert [r.to_dict() for r in merged] == [
        {"i": 0, "keep": "x", "new": True},
        {"i": 10, "keep": "x", "new": True},
        {"i": 20, "keep": "x", "new": True},
    ]
    # a row built with update() replaces, and may drop columns
    dropped = items(2).map(lambda r: r.drop("keep")).materialize()
    assert [r.to_dict() for r in dropped] == [{"i": 0}, {"i": 1}]


def test_map_async_row_replaces_dict_merges():
    async def replace(row):
        return mdr.Row({"only": row.i})

    async def merge(row):
        return {"new": row.i + 1}

    assert [r.to_dict() for r in items(2).map_async(replace).materialize()] == [
        {"only": 0},
        {"only": 1},
    ]
    assert [r.to_dict() for r in items(2).map_async(merge).materialize()] == [
        {"i": 0, "keep": "x", "new": 1},
        {"i": 1, "keep": "x", "new": 2},
    ]


@pytest.mark.parametrize("bad", [None, 3, [{"a": 1}], "text"])
def test_map_other_results_raise_type_error_pointing_to_filter(bad):
    with pytest.raises(TypeError) as info:
        items(2).map(lambda r: bad).materialize()
    message = str(info.value)
    assert "filter" in message and "flat_map" in message
    assert "step 0 (map)" in message


@pytest.mark.parametrize("bad", [None, 3])
def test_map_async_none_raises_type_error(bad):
    async def fn(row):
        return bad

    with pytest.raises(TypeError) as info:
        items(2).map(lambda r: {}).map_async(fn).materialize()
    message = str(info.value)
    assert "filter" in message and "flat_map" in message
    assert "step 1 (map_async)" in message and "00000" in message


def test_sync_map_returning_a_coroutine_says_use_map_async():
    async def fn(row):
        return {}

    with pytest.raises(TypeError, match="map_async"):
        items(1).map(fn).materialize()


def test_filter():
    rows = items(10).filter(lambda r: r.i % 3 == 0).materialize()
    assert [r.i for r in rows] == [0, 3, 6, 9]
    assert items(4).filter(lambda r: False).materialize() == []


def test_flat_map_expands_and_empty_drops():
    def fn(row):
        if row.i % 2:
            return []
        return [row.update(copy=k) if k else {"i": row.i, "copy": k} for k in range(row.i + 1)]

    rows = items(5).flat_map(fn).materialize()
    assert [(r.i, r.copy) for r in rows] == [
        (0, 0),
        (2, 0),
        (2, 1),
        (2, 2),
        (4, 0),
        (4, 1),
        (4, 2),
        (4, 3),
        (4, 4),
    ]
    # a dict is a row on its own (no merge), a Row is used as is
    assert rows[1].to_dict() == {"i": 2, "copy": 0}
    assert rows[2].to_dict() == {"i": 2, "keep": "x", "copy": 1}
    # generators work, and a shard whose rows all drop yields nothing
    gen = items(6, per_shard=2).flat_map(lambda r: (r for _ in range(r.i % 2)))
    assert [r.i for r in gen.materialize()] == [1, 3, 5]


@pytest.mark.parametrize("bad", [None, 5, {"a": 1}, [1, 2]])
def test_flat_map_bad_results(bad):
    with pytest.raises(TypeError, match=r"step 0 \(flat_map\)"):
        items(2).flat_map(lambda r: bad).materialize()


def test_batch_map_results_any_number_of_rows():
    def direct(rows):
        return [{"n": len(rows)}]

    def generator(rows):
        for row in rows:
            yield row
            yield row.update(dup=True)

    async def awaitable(rows):
        await asyncio.sleep(0)
        return rows[:1]

    assert [r.n for r in items(10).batch_map(direct, batch_size=4).materialize()] == [4, 4, 2]
    doubled = items(3).batch_map(generator, batch_size=2).materialize()
    assert [(r.i, "dup" in r) for r in doubled] == [
        (0, False),
        (0, True),
        (1, False),
        (1, True),
        (2, False),
        (2, True),
    ]
    firsts = items(10).batch_map(awaitable, batch_size=4).materialize()
    assert [r.i for r in firsts] == [0, 4, 8]
    assert items(10).batch_map(lambda rows: [], batch_size=3).materialize() == []


def test_batch_map_async_results():
    def sync_direct(rows):
        return [r.update(size=len(rows)) for r in rows]

    async def async_generator_result(rows):
        await asyncio.sleep(0)
        return (r.update(first=rows[0].i) for r in rows)

    rows = items(5).batch_map_async(sync_direct, batch_size=2).materialize()
    assert [(r.i, r.size) for r in rows] == [(0, 2), (1, 2), (2, 2), (3, 2), (4, 1)]
    rows = items(5).batch_map_async(async_generator_result, batch_size=3).materialize()
    assert [(r.i, r.first) for r in rows] == [(0, 0), (1, 0), (2, 0), (3, 3), (4, 3)]


@pytest.mark.parametrize("kind", ["batch_map", "batch_map_async"])
def test_batch_results_must_be_iterables_of_rows(kind):
    step = getattr(items(3), kind)
    with pytest.raises(TypeError, match=kind):
        step(lambda rows: None, batch_size=2).materialize()
    with pytest.raises(TypeError, match="item 0"):
        step(lambda rows: [1], batch_size=2).materialize()


def test_take_stops_early_and_iter_rows_is_lazy():
    seen = []

    def fn(row):
        seen.append(row.i)
        return {}

    pipeline = items(5000, per_shard=1000).map(fn)
    assert seen == []  # building runs nothing
    first = pipeline.take(3)
    assert [r.i for r in first] == [0, 1, 2]
    assert len(seen) < 5000  # the run stopped early
    assert pipeline.take(0) == []
    with pytest.raises(ValueError):
        pipeline.take(-1)


def test_pipelines_are_immutable():
    base = items(3)
    mapped = base.map(lambda r: {"x": 1})
    capped = mapped.with_max_block_rows(2)
    assert base.steps == () and len(mapped.steps) == 1
    assert mapped.max_block_rows is None and capped.max_block_rows == 2
    assert [r.to_dict() for r in base.materialize()] == [{"i": i, "keep": "x"} for i in range(3)]

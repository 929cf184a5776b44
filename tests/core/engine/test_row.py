"""``Row``: an immutable mapping with attribute access."""

from __future__ import annotations

import pickle
from collections.abc import Mapping

import pytest

import refiner_core as mdr


def test_item_and_attribute_access():
    row = mdr.Row({"text": "pick cube", "num_frames": 120})
    assert row["text"] == "pick cube"
    assert row.num_frames == 120
    assert isinstance(row, Mapping)
    assert len(row) == 2 and list(row) == ["text", "num_frames"]
    assert "text" in row and "missing" not in row
    assert row.get("missing", 7) == 7


def test_keyword_construction():
    assert mdr.Row({"a": 1}, b=2).to_dict() == {"a": 1, "b": 2}
    assert mdr.Row(a=1).a == 1


def test_missing_attribute_names_the_column():
    row = mdr.Row({"text": "x"})
    with pytest.raises(AttributeError, match="num_frames") as info:
        _ = row.num_frames
    assert "text" in str(info.value)  # lists the columns that exist
    assert not hasattr(row, "num_frames")
    with pytest.raises(KeyError):
        _ = row["num_frames"]


def test_mapping_methods_win_over_columns():
    row = mdr.Row({"keys": 1, "get": 2, "items": 3, "values": 4, "update": 5, "to_dict": 6})
    assert callable(row.keys) and list(row.keys()) == [
        "keys",
        "get",
        "items",
        "values",
        "update",
        "to_dict",
    ]
    assert callable(row.get) and row.get("get") == 2
    assert row["items"] == 3 and row["update"] == 5
    assert row.to_dict()["to_dict"] == 6


def test_update_returns_a_new_row():
    row = mdr.Row({"a": 1, "b": 2})
    new = row.update({"b": 3, "c": 4}, d=5)
    assert new.to_dict() == {"a": 1, "b": 3, "c": 4, "d": 5}
    assert row.to_dict() == {"a": 1, "b": 2}
    assert row.update(b=9).b == 9
    assert row.update().to_dict() == row.to_dict()
    assert isinstance(new, mdr.Row)


def test_drop_and_to_dict():
    row = mdr.Row({"a": 1, "b": 2, "c": 3})
    assert row.drop("a", "c").to_dict() == {"b": 2}
    assert row.to_dict() == {"a": 1, "b": 2, "c": 3}
    with pytest.raises(KeyError, match="zzz"):
        row.drop("zzz")
    copy = row.to_dict()
    copy["a"] = 100
    assert row.a == 1


def test_immutable():
    source = {"a": 1}
    row = mdr.Row(source)
    source["a"] = 2  # the row holds its own copy
    assert row.a == 1
    with pytest.raises(AttributeError, match="immutable"):
        row.a = 5
    with pytest.raises(AttributeError, match="immutable"):
        row.new = 5
    with pytest.raises(AttributeError):
        del row.a
    with pytest.raises(TypeError):
        row["a"] = 5  # type: ignore[index]
    with pytest.raises(TypeError):
        del row["a"]  # type: ignore[attr-defined]
    assert row.to_dict() == {"a": 1}


def test_equality_hash_and_pickle():
    row = mdr.Row({"a": 1, "b": [1, 2]})
    assert row == {"a": 1, "b": [1, 2]}
    assert row == mdr.Row({"a": 1, "b": [1, 2]})
    assert row != {"a": 2, "b": [1, 2]}
    with pytest.raises(TypeError):
        hash(row)
    clone = pickle.loads(pickle.dumps(row))
    assert isinstance(clone, mdr.Row) and clone == row
    assert "a" in repr(row)

"""One vocabulary for formats, missing policies, asset forms and Lance modes."""

from __future__ import annotations

import inspect
import typing

import pytest

import refiner_core as mdr
from refiner_core import vocabulary
from refiner_core.sinks import SINKS


def test_each_word_list_is_the_literal_it_comes_from():
    assert vocabulary.FORMATS == typing.get_args(vocabulary.Format) == tuple(SINKS)
    assert vocabulary.MISSING_POLICIES == ("error", "set_null", "drop_row")
    assert (mdr.FileAssetConfig.form, mdr.BlobAssetConfig.form) == vocabulary.ASSET_FORMS
    assert vocabulary.LANCE_MODES == ("create", "append", "overwrite")


def test_signatures_use_the_shared_types():
    hints = typing.get_type_hints(mdr.BlobAssetConfig)
    assert hints["missing_policy"] is vocabulary.MissingPolicy
    assert typing.get_type_hints(mdr.FileAssetConfig)["missing_policy"] is vocabulary.MissingPolicy
    # writers return a PipelineSequence, imported by pipeline.py only for type checkers
    names = {"PipelineSequence": mdr.PipelineSequence}
    write_lance = typing.get_type_hints(mdr.Pipeline.write_lance, localns=names)
    assert write_lance["mode"] is vocabulary.LanceMode
    assert typing.get_type_hints(mdr.Pipeline.write, localns=names)["format"] is vocabulary.Format
    assert inspect.signature(mdr.Pipeline.write_lance).parameters["mode"].default == "create"


@pytest.mark.parametrize(
    ("assets", "form"),
    [(mdr.BlobAssetConfig(), "blobs"), (mdr.FileAssetConfig(), "files"), (None, None)],
)
def test_the_summary_names_the_asset_form_with_the_same_word(tmp_path, assets, form):
    media = tmp_path / "a.png"
    media.write_bytes(b"png")
    rows = [{"image": str(media)}]
    pipeline = mdr.from_items(rows, dtypes={"image": mdr.datatype.image_path()})
    summary = pipeline.write_parquet(str(tmp_path / "out"), assets=assets).launch_local().summary
    assert summary.asset_mode == form
    assert summary.missing_policy == (None if assets is None else "error")


def test_unknown_words_fail_naming_the_option_and_the_choices(tmp_path):
    with pytest.raises(ValueError, match="missing_policy 'skip' is not one of 'error', 'set_null'"):
        mdr.FileAssetConfig(missing_policy="skip")
    with pytest.raises(
        ValueError, match=r"write_lance mode must be one of .*'overwrite'.*'upsert'"
    ):
        mdr.from_items([{"a": 1}]).write_lance(str(tmp_path / "x.lance"), mode="upsert")
    with pytest.raises(ValueError, match="unknown output format 'csv'"):
        mdr.from_items([{"a": 1}]).write("csv", str(tmp_path / "x"))

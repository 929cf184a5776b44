"""Every example in refiner_core's docstrings runs (in a scratch working directory)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import refiner_core


def _modules_with_examples() -> list[str]:
    finder = doctest.DocTestFinder()
    names = ["refiner_core"]
    names += [info.name for info in pkgutil.walk_packages(refiner_core.__path__, "refiner_core.")]
    return [
        name
        for name in names
        if any(test.examples for test in finder.find(importlib.import_module(name)))
    ]


MODULES = _modules_with_examples()


def test_examples_are_found_across_the_package():
    for name in (
        "refiner_core",
        "refiner_core.row",
        "refiner_core.sources.base",
        "refiner_core.inference.http1",
    ):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0

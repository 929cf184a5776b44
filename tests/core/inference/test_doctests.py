"""The examples in the inference docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "anthropic",
    "errors",
    "generate",
    "http1",
    "openai",
    "process",
    "providers",
    "response",
    "retry",
    "schema",
    "transport",
    "usage",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"refiner_core.inference.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0

"""Lance tests: refiner keeps Lance out of the forking process, so Lance's fork warning is noise."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/core/lance/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.filterwarnings("ignore:lance is not fork-safe"))

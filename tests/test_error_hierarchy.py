"""Every exception refiner raises is a ``refiner_core.RefinerError``.

``except mdr.RefinerError`` catches any error of refiner_core or refiner_dagster, and
errors that also carry a builtin base (``FileNotFoundError``, ``ValueError``, ...) keep
it, so code catching the builtin still works. Private control-flow signals (``_``
names, never raised to callers) and warnings are left out.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import refiner_core
import refiner_dagster
from refiner_core import RefinerError


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (refiner_core, refiner_dagster):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and not issubclass(value, Warning)
                    and value.__module__ == module.__name__
                    and not name.startswith("_")
                ):
                    found[f"{module.__name__}.{name}"] = value
    return [found[k] for k in sorted(found)]


def test_every_exception_class_derives_from_refiner_error():
    classes = _exception_classes()
    assert len(classes) >= 25, [c.__qualname__ for c in classes]
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, RefinerError)
    ]
    assert not outside, f"not under RefinerError: {outside}"


def test_builtin_bases_are_kept_where_callers_catch_them():
    from refiner_core.inference import InferenceError
    from refiner_core.io import ChecksumMismatchError
    from refiner_core.sinks.assets.base import AssetWriteError, MissingAssetError
    from refiner_dagster.publish import AuditFailedError
    from refiner_dagster.storage import SupersededError

    assert issubclass(MissingAssetError, FileNotFoundError)
    assert issubclass(ChecksumMismatchError, ValueError)
    assert issubclass(AssetWriteError, RuntimeError)
    assert issubclass(InferenceError, RuntimeError)
    assert issubclass(SupersededError, RuntimeError)
    assert issubclass(AuditFailedError, RuntimeError)
    assert issubclass(refiner_core.ClipNotOnKeyframe, ValueError)

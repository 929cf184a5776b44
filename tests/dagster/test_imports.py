"""The pinned Dagster set imports, and refiner_dagster's public API is what it says."""

from __future__ import annotations

import ast
import pathlib

import dagster as dg

import refiner_dagster


def test_dagster_aws_imports_with_the_pinned_dagster():
    import dagster_aws
    from dagster_aws.s3 import S3Resource

    assert dg.__version__ == "1.13.27"
    assert dagster_aws.__version__ == "0.29.27"
    assert issubclass(S3Resource, dg.ConfigurableResource)


def test_public_names_resolve():
    for name in refiner_dagster.__all__:
        assert getattr(refiner_dagster, name) is not None, name
    assert issubclass(refiner_dagster.RefinerBlobIOManager, dg.ConfigurableIOManager)
    assert issubclass(refiner_dagster.RefinerFileIOManager, dg.ConfigurableIOManager)


def test_every_config_field_has_a_description():
    for cls in (refiner_dagster.RefinerBlobIOManager, refiner_dagster.RefinerFileIOManager):
        for name, field in cls.model_fields.items():
            assert field.description, f"{cls.__name__}.{name} has no description"


def test_no_private_dagster_imports():
    package = pathlib.Path(refiner_dagster.__file__).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("dagster._"), f"{path.name} imports {name}"


def test_docstring_examples_run(tmp_path, monkeypatch):
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    package = pathlib.Path(refiner_dagster.__file__).parent
    attempted = {}
    for path in sorted(package.glob("*.py")):
        if path.stem == "__init__":
            module = refiner_dagster
        else:
            module = importlib.import_module(f"refiner_dagster.{path.stem}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, f"{path.name}: {result.failed} docstring example(s) failed"
        attempted[path.stem] = result.attempted
    # the modules with public classes carry runnable examples
    for name in ("io_manager", "finalization", "checks", "sensors", "schedules", "ops"):
        assert attempted[name] > 0, name

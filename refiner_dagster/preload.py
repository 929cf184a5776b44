"""A module to preload in the multiprocess executor's forkserver, so step processes start warm.

Dagster's multiprocess executor starts every step in a new process. With
``start_method: forkserver`` it forks each one from a server process that imported the
``preload_modules`` once; a step then only pays for what the server did not import.
Name this module first, then the module of your definitions::

    import dagster as dg

    executor = dg.multiprocess_executor.configured(
        {
            "start_method": {
                "forkserver": {
                    "preload_modules": ["refiner_dagster.preload", "my_project.definitions"]
                }
            }
        }
    )

Importing it loads ``refiner_core`` and ``refiner_dagster`` (pyarrow and pyarrow.parquet
with them), then what each step process would otherwise load again on its own:

- the instance storage modules (SQLAlchemy, Alembic, the SQLite run and event-log
  storages), which ``import dagster`` leaves until the first instance is opened and
  which a step needs to open the run's instance before it starts: it opens and disposes
  of an in-memory instance;
- pandas, when installed, which pyarrow imports on its first conversion of Python
  values (``pa.array``, ``pa.table``), that is in the first rows a step writes: it
  converts one value.

Nothing stays open and nothing is written: no thread, file or database connection is
left for the forked steps to inherit.

Example:
    >>> import sys, refiner_dagster.preload
    >>> "sqlalchemy" in sys.modules and "refiner_core" in sys.modules
    True
"""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (the format of every dataset and of its manifests)

import refiner_core  # noqa: F401
import refiner_dagster  # noqa: F401


def warm_instance_storage() -> None:
    """Open and dispose of an in-memory instance, loading the storage modules it uses."""
    with dg.DagsterInstance.ephemeral():
        pass


def warm_pyarrow_conversion() -> None:
    """Convert one Python value: pyarrow then imports pandas, when installed, for good."""
    pa.array([0])


warm_instance_storage()
warm_pyarrow_conversion()

"""The demo code location (``refiner_dagster.demo.definitions``) and its synthetic dataset.

``dagster dev -w workspace.yaml`` loads it; ``scripts/demo.sh`` materializes every
demo asset from the CLI and prints where the outputs landed. Importing this package
imports neither Dagster definitions nor data: the dataset is generated on the first
materialization (see :mod:`refiner_dagster.demo.data`).
"""

__all__: list[str] = []

"""The pipeline of the component-defined demo dataset (``defs/episode_thumbnails``).

Example:
    >>> from refiner_dagster.demo.thumbnails import thumbnails
    >>> callable(thumbnails)
    True
"""

import refiner_core as mdr
from refiner_dagster.demo.data import ensure_demo_data, source_dtypes


def thumbnails() -> mdr.Pipeline:
    """One row per episode: its id and its thumbnail image (a path, packed by the writer)."""
    demo = ensure_demo_data()
    dtypes = {"thumbnail": source_dtypes()["thumbnail"]}
    return mdr.read_parquet(str(demo.table), dtypes=dtypes, columns=["episode_id", "thumbnail"])

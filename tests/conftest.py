"""Shared test settings."""

import os

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

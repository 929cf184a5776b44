"""Dagster integration."""

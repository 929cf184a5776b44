"""Refiner pipeline engine."""

"""Component-defined demo datasets: one folder per dataset, each with a ``defs.yaml``."""

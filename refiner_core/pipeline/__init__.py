"""Building a pipeline: steps, callback results and stage sequences."""

"""Running a pipeline: blocks, worker event loops, shard stages, attempts and the local launcher."""

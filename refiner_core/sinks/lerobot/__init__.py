"""LeRobot v3.0 writing: a sink whose finalization numbers episodes and writes ``meta/``."""

from .sink import LeRobotFinalizeStage, LeRobotSink

__all__ = ["LeRobotFinalizeStage", "LeRobotSink"]

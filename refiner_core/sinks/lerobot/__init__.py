"""LeRobot v3.0 writing: a sink whose finalization numbers episodes and writes ``meta/``."""

from .sink import LeRobotSink

__all__ = ["LeRobotSink"]

"""Errors raised while building or using a robot model."""

__all__ = ["RobotModelError"]


class RobotModelError(ValueError):
    """A URDF, robot configuration or model input is invalid.

    The message always names the offending file, link, joint or argument.
    """

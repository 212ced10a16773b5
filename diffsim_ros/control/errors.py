"""Errors raised by the control layer (configuration problems; never during a control cycle)."""

__all__ = ["ControlError", "TorqueMapError"]


class ControlError(ValueError):
    """A controller or safety configuration that cannot be used (the message names the problem)."""


class TorqueMapError(ControlError):
    """A torque map that cannot be built, read, or used with a given model."""

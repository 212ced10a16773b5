"""Errors raised by the contact package, and the check of a scalar setting that raises them."""

import math

__all__ = ["ContactError", "checked_number"]


class ContactError(ValueError):
    """Invalid contact input: degenerate geometry, non-positive mass, interpenetrating start state."""


def checked_number(name, value, low=-math.inf, high=math.inf, low_open=False):
    """``value`` as a float, or a ContactError naming ``name`` and the bounds.

    Args:
        name: The value's name in the message, with its unit (e.g. ``"margin [m]"``).
        value: A real number.
        low, high: Bounds (``high`` inclusive).
        low_open: Whether ``low`` itself is excluded.

    Returns:
        ``float(value)``.

    Raises:
        ContactError: Non-finite or out of bounds.
    """
    value = float(value)
    bad = not math.isfinite(value) or value > high or (value <= low if low_open else value < low)
    if bad:
        bound = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high < math.inf else "")
        raise ContactError(f"{name} must be finite and {bound}, got {value}")
    return value

"""Errors raised by the contact package."""

__all__ = ["ContactError"]


class ContactError(ValueError):
    """Invalid contact input: degenerate geometry, non-positive mass, interpenetrating start state."""

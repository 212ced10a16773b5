"""Collision shapes (box, sphere, capsule, plane) and the inertia of uniform solids.

Shapes are geometry only: fixed floats validated at construction. Poses, masses and contact
coefficients live in the world, so that they can be differentiable tensors.
"""

import math
from dataclasses import dataclass

import torch

from diffsim_ros.sim.contact.errors import ContactError

__all__ = ["Box", "Sphere", "Capsule", "Plane", "unit_inertia", "bounding_radius"]


def _positive(name, value):
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ContactError(f"{name} must be a positive finite length [m], got {value}")
    return value


@dataclass(frozen=True)
class Box:
    """Box centred at its frame origin.

    Attributes:
        half_extents: Half side lengths along the frame axes [m], three positive floats.
    """

    half_extents: tuple

    def __post_init__(self):
        values = tuple(self.half_extents)
        if len(values) != 3:
            raise ContactError(f"box half_extents needs 3 values, got {values}")
        object.__setattr__(self, "half_extents", tuple(_positive("box half extent", v) for v in values))


@dataclass(frozen=True)
class Sphere:
    """Sphere centred at its frame origin.

    Attributes:
        radius: Radius [m].
    """

    radius: float

    def __post_init__(self):
        object.__setattr__(self, "radius", _positive("sphere radius", self.radius))


@dataclass(frozen=True)
class Capsule:
    """Capsule: the points within ``radius`` of the segment from ``-half_length`` to ``+half_length`` on z.

    Attributes:
        radius: Radius [m].
        half_length: Half length of the core segment [m] (0 makes a sphere).
    """

    radius: float
    half_length: float

    def __post_init__(self):
        object.__setattr__(self, "radius", _positive("capsule radius", self.radius))
        half = float(self.half_length)
        if not math.isfinite(half) or half < 0.0:
            raise ContactError(f"capsule half_length must be a finite length >= 0 [m], got {half}")
        object.__setattr__(self, "half_length", half)


@dataclass(frozen=True)
class Plane:
    """Half-space below the plane z = 0 of its frame (outward normal +z); static geometry only."""


def unit_inertia(shape, dtype=None, device=None):
    """Principal inertia of a uniform solid of unit mass about its centre [m²], shape (3,).

    Multiply by the mass [kg] to get [kg·m²]. Capsules combine the cylinder and the two
    hemispherical caps (parallel-axis theorem for the caps).

    Raises:
        ContactError: For planes (not a body).
    """
    if isinstance(shape, Box):
        x, y, z = (2.0 * h for h in shape.half_extents)
        values = [(y * y + z * z) / 12.0, (x * x + z * z) / 12.0, (x * x + y * y) / 12.0]
    elif isinstance(shape, Sphere):
        values = [0.4 * shape.radius**2] * 3
    elif isinstance(shape, Capsule):
        r, h = shape.radius, 2.0 * shape.half_length
        v_cyl, v_caps = math.pi * r * r * h, 4.0 / 3.0 * math.pi * r**3
        m_cyl, m_caps = v_cyl / (v_cyl + v_caps), v_caps / (v_cyl + v_caps)
        axial = m_cyl * r * r / 2.0 + m_caps * 0.4 * r * r
        # Caps: inertia of a sphere split in two halves whose centroids sit 3r/8 beyond the segment ends.
        cap_offset = h / 2.0 + 3.0 * r / 8.0
        transverse = (
            m_cyl * (r * r / 4.0 + h * h / 12.0)
            + m_caps * (0.4 * r * r - (3.0 * r / 8.0) ** 2 + cap_offset**2)
        )
        values = [transverse, transverse, axial]
    else:
        raise ContactError(f"{type(shape).__name__} is not a body shape (no inertia)")
    return torch.tensor(values, dtype=dtype or torch.float64, device=device)


def bounding_radius(shape):
    """Radius of a sphere about the frame origin enclosing the shape [m] (inf for planes)."""
    if isinstance(shape, Box):
        return math.sqrt(sum(h * h for h in shape.half_extents))
    if isinstance(shape, Sphere):
        return shape.radius
    if isinstance(shape, Capsule):
        return shape.radius + shape.half_length
    return math.inf

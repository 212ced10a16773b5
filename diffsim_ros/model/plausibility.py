"""Physical plausibility of parameter values: one definition for identification and control.

Identification uses these bounds as the optimizer's box constraints and to refuse estimates
that land outside them; the controller uses the same check before it adopts an estimate, and
configs and calibration files are checked with it when they are loaded. A value is plausible
when it is finite and inside its group's bounds:

=========================  ==============================================================
parameter                  plausible when
=========================  ==============================================================
``payload.mass``           0 <= m <= ``payload_mass_max``
``payload.com``            within ``payload_com_radius`` of the payload frame
``<link>.mass``            0 < m <= ``body_mass_max``
``<link>.com``             within ``body_com_radius`` of the body frame
``<link>.inertia``         positive-definite principal moments obeying the triangle inequality
``<joint>.damping``        0 <= b <= ``damping_max``
``<joint>.friction``       0 <= mu <= ``friction_max``
``<joint>.armature``       0 <= a <= ``armature_max``
``*.spring.stiffness``     0 < k <= ``stiffness_max``
``*.spring.offset``        |offset| <= ``spring_offset_max``
``*.spring.l1`` / ``l2``   0 < l <= ``spring_length_max`` (also ``rest_length``)
``*.spring.alpha1``        |alpha1| <= pi
``*.spring.damping``       0 <= c <= ``spring_damping_max``
``*.spring.point_a``       within ``spring_length_max`` of its link frame (also ``point_b``)
``<joint>.origin.xyz``     within ``origin_radius`` of the joint's parent frame origin
``camera.pose``            position within ``camera_radius`` of the base; unit quaternion
``efforts.delay``          |delay| <= ``effort_delay_max``
=========================  ==============================================================
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "PlausibilityBounds", "DEFAULT_BOUNDS", "QUATERNION_NORM_TOLERANCE", "describe_violations", "model_violations",
    "parameter_kind", "plausibility_violations", "scalar_bounds",
]

# A quaternion this far from unit norm is garbage, not rounding (a hand-typed or message pose
# is normalized within it).
QUATERNION_NORM_TOLERANCE = 0.1


@dataclass(frozen=True)
class PlausibilityBounds:
    """Limits outside which a parameter value is physically implausible (SI units)."""

    payload_mass_max: float = 25.0
    """[kg] heavier than any arm in this package's range can carry."""
    effort_delay_max: float = 0.1
    """[s] longer than any effort sensor's lag (Baxter publishes joint states at 100 Hz)."""
    payload_com_radius: float = 0.5
    """[m] a payload's centre of mass lies within this distance of the payload frame."""
    body_mass_max: float = 200.0
    """[kg] per link."""
    body_com_radius: float = 2.0
    """[m] a link's centre of mass lies within this distance of its joint frame."""
    damping_max: float = 500.0
    """[N·m·s/rad] viscous damping."""
    friction_max: float = 500.0
    """[N·m] Coulomb friction."""
    armature_max: float = 50.0
    """[kg·m² or kg] reflected rotor inertia (a 1e-4 kg·m² rotor behind a 160:1 gear reflects 2.6)."""
    stiffness_max: float = 1e7
    """[N/m or N·m/rad] spring stiffness."""
    spring_offset_max: float = math.pi
    """[rad] spring offset angle magnitude."""
    spring_length_max: float = 5.0
    """[m] spring levers, rest lengths and point spring ends."""
    spring_damping_max: float = 1e5
    """[N·s/m or N·m·s/rad] damping of a spring element (gas springs: 1e2-1e4 N·s/m)."""
    origin_radius: float = 5.0
    """[m] joint origin translation length."""
    camera_radius: float = 50.0
    """[m] camera distance from the base frame."""

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"plausibility bound {f.name} must be a positive finite number, got {value!r}")

    @classmethod
    def from_mapping(cls, raw, where="plausibility"):
        """Bounds from a config mapping (unknown keys and non-numbers are named errors)."""
        raw = raw or {}
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: expected a mapping of bounds, got {raw!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"{where}: unknown bounds {unknown}; allowed {sorted(known)}")
        values = {}
        for key, value in raw.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}.{key} must be a number, got {value!r}")
            values[key] = float(value)
        return cls(**values)


DEFAULT_BOUNDS = PlausibilityBounds()


def parameter_kind(name):
    """The plausibility kind of a parameter name (``"payload.mass"``, ``"damping"``, ...), or None."""
    if name in ("payload.mass", "payload.com", "camera.pose", "efforts.delay"):
        return name
    for suffix in ("spring.stiffness", "spring.offset", "spring.alpha1", "spring.l1", "spring.l2",
                   "spring.rest_length", "spring.damping", "spring.point_a", "spring.point_b", "origin.xyz",
                   "damping", "friction", "armature", "effort_bias", "mass", "com", "inertia"):
        if name.endswith("." + suffix):
            return suffix
    return None


def scalar_bounds(name, bounds=DEFAULT_BOUNDS):
    """Box bounds ``(lower, upper)`` of a scalar parameter, for optimizers; None if not a box.

    Strict lower bounds (stiffness, masses of links) are returned as 0: an optimizer may touch
    them, and :func:`plausibility_violations` then reports the value.
    """
    kind = parameter_kind(name)
    return {
        "payload.mass": (0.0, bounds.payload_mass_max),
        "efforts.delay": (-bounds.effort_delay_max, bounds.effort_delay_max),
        "mass": (0.0, bounds.body_mass_max),
        "damping": (0.0, bounds.damping_max),
        "friction": (0.0, bounds.friction_max),
        "armature": (0.0, bounds.armature_max),
        "spring.stiffness": (0.0, bounds.stiffness_max),
        "spring.offset": (-bounds.spring_offset_max, bounds.spring_offset_max),
        "spring.alpha1": (-math.pi, math.pi),
        "spring.l1": (0.0, bounds.spring_length_max),
        "spring.l2": (0.0, bounds.spring_length_max),
        "spring.rest_length": (0.0, bounds.spring_length_max),
        "spring.damping": (0.0, bounds.spring_damping_max),
    }.get(kind)


def _inertia_reason(value):
    ixx, ixy, ixz, iyy, iyz, izz = value
    matrix = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    moments = np.linalg.eigvalsh(matrix)
    if moments[0] <= 0:
        return f"principal moments {moments.tolist()} must be positive"
    a, b, c = moments
    if a + b < c * (1 - 1e-9):
        return f"principal moments {moments.tolist()} violate the triangle inequality"
    return None


def _radius_reason(value, radius, what):
    with np.errstate(over="ignore"):
        norm = float(np.linalg.norm(value))
    return None if norm <= radius else f"{what} {norm:.4g} m from its frame, beyond {radius:g} m"


def _box_reason(value, low, high, strict_low, unit):
    if value < low or (strict_low and value <= low) or value > high:
        side = f"> {low:g}" if strict_low else f">= {low:g}"
        return f"{value:.6g} {unit} is outside [{side}, <= {high:g}]"
    return None


def _camera_reason(value, bounds):
    if value.shape != (7,):
        return f"expected [x, y, z, qx, qy, qz, qw], got {value.size} values"
    norm = float(np.linalg.norm(value[3:]))
    if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
        return f"quaternion norm {norm:.6g} is not 1"
    return _radius_reason(value[:3], bounds.camera_radius, "camera")


_UNITS = {"payload.mass": "kg", "efforts.delay": "s", "mass": "kg", "damping": "N·m·s/rad", "friction": "N·m", "armature": "kg·m² or kg", "spring.stiffness": "N/m or N·m/rad",
          "spring.offset": "rad", "spring.alpha1": "rad", "spring.l1": "m", "spring.l2": "m", "spring.rest_length": "m",
          "spring.damping": "N·s/m or N·m·s/rad"}
_STRICT = {"mass", "spring.stiffness", "spring.l1", "spring.l2"}


def _reason(name, value, bounds):
    kind = parameter_kind(name)
    if not np.all(np.isfinite(value)):
        return "not finite"
    if kind == "payload.com":
        return _radius_reason(value, bounds.payload_com_radius, "payload COM")
    if kind == "com":
        return _radius_reason(value, bounds.body_com_radius, "COM")
    if kind == "origin.xyz":
        return _radius_reason(value, bounds.origin_radius, "joint origin")
    if kind in ("spring.point_a", "spring.point_b"):
        if value.shape != (3,):
            return f"expected 3 values, got {value.size}"
        return _radius_reason(value, bounds.spring_length_max, "spring end")
    if kind == "inertia":
        return _inertia_reason(value) if value.shape == (6,) else f"expected 6 values, got {value.size}"
    if kind == "camera.pose":
        return _camera_reason(value, bounds)
    box = scalar_bounds(name, bounds)
    if box is None:
        return None
    if value.size != 1:
        return f"expected one value, got {value.size}"
    return _box_reason(float(value.reshape(())), *box, kind in _STRICT, _UNITS[kind])


def plausibility_violations(values, bounds=DEFAULT_BOUNDS):
    """Which parameters are implausible, and why.

    Args:
        values: Mapping parameter name -> value (float, sequence, numpy array or tensor).
        bounds: PlausibilityBounds.

    Returns:
        Dict name -> reason for every implausible value (empty when all are plausible).
        Names this module does not know are reported only when not finite.
    """
    out = {}
    for name, value in values.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            out[name] = f"not a number: {value!r}"
            continue
        reason = _reason(name, array, bounds)
        if reason is not None:
            out[name] = reason
    return out


def model_violations(model, bounds=DEFAULT_BOUNDS):
    """:func:`plausibility_violations` of every parameter of a RobotModel (empty dict: plausible)."""
    return plausibility_violations(model.named_parameters(), bounds)


def describe_violations(violations):
    """One line naming every implausible parameter and why (``name: reason; ...``)."""
    return "; ".join(f"{name}: {reason}" for name, reason in violations.items())

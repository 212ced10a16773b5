"""Spring elements: joint springs with a configurable law and point-to-point springs.

Every element has a name that owns its calibration parameters ``<name>.spring.<key>``
(a joint spring's name is its joint). The laws and their parameters:

=============  ==============================================================================
``lever``      Baxter's series-elastic shoulder spring (Liu et al.), on a revolute joint:
               ``V = 1/2 k (x(theta) - x_rest)^2``,
               ``x(theta) = sqrt(l1^2 + l2^2 - 2 l1 l2 cos(pi - alpha1 - alpha2 + theta))``;
               keys ``stiffness`` [N/m], ``offset`` (alpha2) [rad], ``alpha1`` [rad], ``l1``,
               ``l2``, ``rest_length`` [m]. No damper: a damped spring on levers is a ``point``
               spring between the lever ends, and the joint's own damping acts at the joint.
``torsion``    A linear joint spring with a parallel dashpot:
               ``tau = -k (q - q0) - c qd`` (torsional on a revolute joint [N·m/rad,
               N·m·s/rad], linear along a prismatic one [N/m, N·s/m]); keys ``stiffness``,
               ``offset`` (q0) [rad or m], ``damping``. Its damping adds to the joint's viscous
               damping: the two are indistinguishable in any data.
``point``      A spring-damper between a point on ``link_a`` and a point on ``link_b`` (either
               may be the base link): force along the line ``f = -k (L - L0) - c dL/dt``
               (positive pushes the points apart), ``V = 1/2 k (L - L0)^2``; keys
               ``stiffness`` [N/m], ``rest_length`` L0 [m], ``damping`` [N·s/m], ``point_a``,
               ``point_b`` [m] (3,) in their link frames. ``tension_only`` makes it a cable or
               elastic band: no force while ``L <= L0`` (slack), spring and dashpot when taut.
=============  ==============================================================================

The values in these dataclasses are the nominal ones; a model keeps them as differentiable
tensors in :class:`~diffsim_ros.model.robot_model.RobotParams` (see :data:`SPRING_LAWS` for
which field holds which key).
"""

import re
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "LeverSpring",
    "JointSpring",
    "TorsionSpring",
    "PointSpring",
    "PointSpringLayout",
    "SpringLaw",
    "SPRING_LAWS",
    "valid_spring_name",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


class _OnJoint:
    """A joint spring is named after its joint."""

    @property
    def name(self):
        return self.joint


@dataclass(frozen=True)
class LeverSpring(_OnJoint):
    """Baxter's series-elastic spring on one revolute joint (law ``lever``); defaults are Baxter's."""

    joint: str
    stiffness: float = 8000.0  # [N/m]
    offset: float = 0.10  # alpha2 [rad]
    alpha1: float = 0.20  # [rad]
    l1: float = 0.30  # [m]
    l2: float = 0.07  # [m]
    rest_length: float = 0.20  # [m]

    law: ClassVar[str] = "lever"

    def describe(self):
        """One line with the law and every value (URDF export comments, logs)."""
        return (
            f"{self.joint}: lever stiffness={self.stiffness:.6g} N/m offset={self.offset:.6g} rad "
            f"alpha1={self.alpha1:.6g} rad l1={self.l1:.6g} m l2={self.l2:.6g} m rest_length={self.rest_length:.6g} m"
        )


JointSpring = LeverSpring
"""The lever law's former name (kept for existing code and configs)."""


@dataclass(frozen=True)
class TorsionSpring(_OnJoint):
    """A linear joint spring ``tau = -k (q - offset) - damping qd`` (law ``torsion``)."""

    joint: str
    stiffness: float
    offset: float = 0.0
    damping: float = 0.0

    law: ClassVar[str] = "torsion"

    def describe(self):
        """One line with the law and every value."""
        return f"{self.joint}: torsion stiffness={self.stiffness:.6g} offset={self.offset:.6g} damping={self.damping:.6g}"


@dataclass(frozen=True)
class PointSpring:
    """A spring-damper between two link points (law ``point``); see the module docstring.

    Attributes:
        name: Element name (parameters ``<name>.spring.*``); letters, digits, ``_``, ``-``.
        link_a: Link carrying the first end (the base link is allowed).
        point_a: First end in ``link_a``'s frame [m], (3,).
        link_b: Link carrying the second end.
        point_b: Second end in ``link_b``'s frame [m], (3,).
        stiffness: k [N/m].
        rest_length: L0 [m].
        damping: c [N·s/m].
        tension_only: A cable or elastic band: no force while slack (``L <= L0``).
    """

    name: str
    link_a: str
    point_a: tuple
    link_b: str
    point_b: tuple
    stiffness: float
    rest_length: float
    damping: float = 0.0
    tension_only: bool = False

    law: ClassVar[str] = "point"

    def describe(self):
        a = " ".join(f"{v:.6g}" for v in self.point_a)
        b = " ".join(f"{v:.6g}" for v in self.point_b)
        kind = "cable (tension only)" if self.tension_only else "spring"
        return (
            f"{self.name}: point {kind} from {self.link_a} [{a}] m to {self.link_b} [{b}] m "
            f"stiffness={self.stiffness:.6g} N/m rest_length={self.rest_length:.6g} m damping={self.damping:.6g} N·s/m"
        )


@dataclass(frozen=True)
class PointSpringLayout:
    """The fixed structure of a point spring in a model: its ends' links and bodies (-1 = base)."""

    name: str
    link_a: str
    link_b: str
    body_a: int
    body_b: int
    tension_only: bool


@dataclass(frozen=True)
class SpringLaw:
    """A law's element class and its parameter keys -> RobotParams fields (shape (count,) or (count, 3))."""

    element: type
    fields: dict
    vectors: tuple = ()


SPRING_LAWS = {
    "lever": SpringLaw(
        LeverSpring,
        {
            "stiffness": "spring_stiffness",
            "offset": "spring_offset",
            "alpha1": "spring_alpha1",
            "l1": "spring_l1",
            "l2": "spring_l2",
            "rest_length": "spring_rest_length",
        },
    ),
    "torsion": SpringLaw(
        TorsionSpring, {"stiffness": "torsion_stiffness", "offset": "torsion_offset", "damping": "torsion_damping"}
    ),
    "point": SpringLaw(
        PointSpring,
        {
            "stiffness": "point_stiffness",
            "rest_length": "point_rest_length",
            "damping": "point_damping",
            "point_a": "point_anchor_a",
            "point_b": "point_anchor_b",
        },
        vectors=("point_a", "point_b"),
    ),
}
"""Law name -> :class:`SpringLaw`."""


def valid_spring_name(name):
    """Whether ``name`` can own parameters ``<name>.spring.*`` unambiguously."""
    return isinstance(name, str) and bool(_NAME.match(name))

"""How a contact world steps: the solver and its settings, apart from what the world holds.

A :class:`~diffsim_ros.sim.contact.world.ContactWorld` holds one :class:`ContactOptions`
(``world.options``), as a MuJoCo model holds its ``opt``; the time step stays with the world,
since a robot's simulator fixes it.
"""

from dataclasses import dataclass

from diffsim_ros.sim.contact.cone import REGULARIZATION
from diffsim_ros.sim.contact.errors import ContactError, checked_number

__all__ = ["ContactOptions", "SOLVERS", "CONE_METHODS"]

SOLVERS = ("lcp", "cone")
CONE_METHODS = ("auto", "staggered")


@dataclass(frozen=True)
class ContactOptions:
    """Solver and step settings of a contact world, checked on creation.

    Attributes:
        solver: ``"lcp"`` (Nimble boxed LCP, 4-sided pyramid) or ``"cone"`` (Coulomb cone).
        margin: Speculative contact distance [m] (>= 0).
        baumgarte: Fraction of a penetration removed per step, in (0, 1].
        bounce_threshold: Impact speed [m/s] below which contacts do not bounce (resting), >= 0.
        complementarity_aware: LCP only: Nimble's complementarity-aware gradients (§IV-D).
        cone_method: Cone only: ``"auto"`` or ``"staggered"`` (see
            :func:`~diffsim_ros.sim.contact.cone.solve_cone`).
        impact_substeps: Without a robot: a step in which two objects may touch (a slot of an
            object-object pair active at the speculative margin) is taken as this many
            substeps of ``dt / impact_substeps``; 1: never.
        regularization: Cone only: relative compliance added to the Delassus diagonal
            (:func:`~diffsim_ros.sim.contact.cone.regularize`), in [0, 1]. The default keeps
            the rigid identities to ~1e-6; fits raise it (``FitSettings.regularization``).

    Raises:
        ContactError: A value out of its range (the message names it).
    """

    solver: str = "lcp"
    margin: float = 0.02
    baumgarte: float = 0.2
    bounce_threshold: float = 0.1
    complementarity_aware: bool = False
    cone_method: str = "auto"
    impact_substeps: int = 1
    regularization: float = REGULARIZATION

    def __post_init__(self):
        if self.solver not in SOLVERS:
            raise ContactError(f"solver must be 'lcp' or 'cone', got {self.solver!r}")
        if self.cone_method not in CONE_METHODS:
            raise ContactError(f"cone_method must be 'auto' or 'staggered', got {self.cone_method!r}")
        substeps = self.impact_substeps
        if int(substeps) != substeps or substeps < 1:
            raise ContactError(f"impact_substeps must be a positive integer, got {substeps!r}")
        checked = {
            "margin": checked_number("margin [m]", self.margin, 0.0),
            "baumgarte": checked_number("baumgarte", self.baumgarte, 0.0, 1.0, low_open=True),
            "bounce_threshold": checked_number("bounce_threshold [m/s]", self.bounce_threshold, 0.0),
            "complementarity_aware": bool(self.complementarity_aware),
            "impact_substeps": int(substeps),
            "regularization": checked_number("regularization", self.regularization, 0.0, 1.0),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

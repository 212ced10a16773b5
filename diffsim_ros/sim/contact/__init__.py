"""Differentiable contact: collision detection, Nimble-style LCP and Le Lidec-style friction cone.

Public pieces:

* shapes (:class:`Box`, :class:`Sphere`, :class:`Capsule`, :class:`Plane`) and
  :func:`collide` (contacts with pose gradients);
* solvers :func:`solve_lcp` (boxed LCP, clamping-set gradients) and :func:`solve_cone`
  (Coulomb cone by staggered projections, implicit gradients);
* :class:`ContactWorld`: free objects, static shapes and a robot (any
  :class:`~diffsim_ros.sim.base.JointSpaceSimulator`) stepped together; the model (objects,
  shapes, pair table, parameters) with its :class:`ContactOptions` (solver and step settings);
  its step is :mod:`diffsim_ros.sim.contact.step`, a list of stages (detect, in
  :mod:`diffsim_ros.sim.contact.broadphase`, contact Jacobian,
  free velocity, Delassus, solve, bounce correction, robot response, integrate);
  :class:`WorldState` and :class:`StepInfo` are what a step reads and returns.
"""

from diffsim_ros.sim.contact.cone import ConeSolution, solve_cone, staggered_projections
from diffsim_ros.sim.contact.detection import Contacts, collide, slot_count
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.lcp import LCPSolution, lcp_impulse, solve_lcp
from diffsim_ros.sim.contact.shapes import Box, Capsule, Plane, Sphere, unit_inertia
from diffsim_ros.sim.contact.options import ContactOptions
from diffsim_ros.sim.contact.state import StepInfo, WorldState
from diffsim_ros.sim.contact.world import ContactWorld, LinkProxy, RigidObject, StaticShape

__all__ = [
    "Box",
    "Capsule",
    "ConeSolution",
    "ContactError",
    "ContactOptions",
    "ContactWorld",
    "Contacts",
    "LCPSolution",
    "LinkProxy",
    "Plane",
    "RigidObject",
    "Sphere",
    "StaticShape",
    "StepInfo",
    "WorldState",
    "collide",
    "lcp_impulse",
    "slot_count",
    "solve_cone",
    "solve_lcp",
    "staggered_projections",
    "unit_inertia",
]

"""What a contact world's step reads and returns: :class:`WorldState` and :class:`StepInfo`."""

from dataclasses import dataclass, fields

import torch

__all__ = ["WorldState", "StepInfo", "stack_time"]


@dataclass(frozen=True)
class WorldState:
    """State of the world (leading batch shape ``...``, J objects, n robot joints).

    Attributes:
        position: Object COM positions [m], shape (..., J, 3).
        orientation: Object orientations, unit quaternions (w, x, y, z), shape (..., J, 4).
        linear_velocity: COM velocities in the world [m/s], shape (..., J, 3).
        angular_velocity: Angular velocities in the world [rad/s], shape (..., J, 3).
        q: Robot joint positions [rad or m], shape (..., n), or None without a robot.
        qd: Robot joint velocities, shape (..., n), or None.
    """

    position: torch.Tensor
    orientation: torch.Tensor
    linear_velocity: torch.Tensor
    angular_velocity: torch.Tensor
    q: torch.Tensor | None = None
    qd: torch.Tensor | None = None

    def map(self, fn):
        """Apply ``fn`` to every tensor field (None stays None)."""
        return WorldState(**{f.name: (None if getattr(self, f.name) is None else fn(getattr(self, f.name))) for f in fields(self)})


@dataclass(frozen=True)
class StepInfo:
    """Diagnostics of one step.

    Attributes:
        contacts: Detected contact slots (:class:`~diffsim_ros.sim.contact.detection.Contacts`).
        impulse: Contact impulses ``[n, t1, t2]`` [N·s], shape (..., K, 3).
        solution: The solver's LCPSolution or ConeSolution (pass as ``warm`` to the next step).
        bouncing: Contacts treated as bounces this step, bool (..., K).
        max_penetration: Largest penetration of an active contact at the start of the step [m], (...).
    """

    contacts: object
    impulse: torch.Tensor
    solution: object
    bouncing: torch.Tensor
    max_penetration: torch.Tensor


def stack_time(states):
    """Stack states over time.

    Args:
        states: Sequence of T :class:`WorldState` of the same shapes.

    Returns:
        WorldState with a time dimension before the per-object one (position (..., T, J, 3)) and
        before the joint one (q (..., T, n)).
    """
    first = states[0]
    out = {}
    for f in fields(first):
        if getattr(first, f.name) is None:
            out[f.name] = None
        else:
            dim = -2 if f.name in ("q", "qd") else -3
            out[f.name] = torch.stack([getattr(s, f.name) for s in states], dim)
    return WorldState(**out)

"""Particle state and control of the PBD simulator (immutable; ``step`` returns new ones)."""

import dataclasses
from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.sim.pbd.errors import PBDError

__all__ = ["PBDState", "PBDControl", "check_state", "check_control"]


@dataclass(frozen=True)
class PBDState:
    """Poses and velocities of the N = n + 1 particles (particle 0 = base, i + 1 = body i).

    All quantities are in the world (= model base) frame.
    """

    pos: torch.Tensor
    """Centre-of-mass positions [m], shape (..., N, 3)."""
    quat: torch.Tensor
    """Body-frame orientations, unit quaternions (w, x, y, z), shape (..., N, 4)."""
    vel: torch.Tensor
    """COM linear velocities [m/s], shape (..., N, 3)."""
    omega: torch.Tensor
    """Angular velocities [rad/s], shape (..., N, 3)."""

    @property
    def batch_shape(self):
        return self.pos.shape[:-2]

    def replace(self, **changes):
        """New state with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def detach(self):
        """Copy detached from the autograd graph."""
        return PBDState(*(t.detach() for t in (self.pos, self.quat, self.vel, self.omega)))


@dataclass(frozen=True)
class PBDControl:
    """Inputs held constant over one step.

    Besides feed-forward torques and external wrenches, a joint drive (a PD / stiffness
    controller ``K (target - q) - D qd``) can be given: it is solved implicitly inside the
    constraint projection, so stiff gains on light links stay stable at any step, which a
    torque computed once per control period cannot.
    """

    tau: torch.Tensor
    """Joint torques/forces [N·m or N], shape (..., n)."""
    wrench: torch.Tensor | None = None
    """External wrenches ``[torque, force]`` on the n bodies, world axes, torque about each
    body's COM [N·m, N], shape (..., n, 6); None for none."""
    target: torch.Tensor | None = None
    """Drive targets [rad or m], shape (..., n); None for no drive."""
    stiffness: torch.Tensor | None = None
    """Drive stiffness K [N·m/rad or N/m], shape (..., n) (with ``target``)."""
    drive_damping: torch.Tensor | None = None
    """Drive damping D [N·m·s/rad or N·s/m], shape (..., n) (added to the joint damping)."""

    @property
    def has_drive(self):
        return self.target is not None


def _check_tensor(name, value, model, shape_tail):
    if not isinstance(value, torch.Tensor):
        raise PBDError(f"{name} must be a torch tensor, got {type(value).__name__}")
    if value.dtype != model.dtype or value.device != model.device:
        raise PBDError(
            f"{name} has dtype {value.dtype} on {value.device}; the model uses {model.dtype} on {model.device}"
        )
    if tuple(value.shape[value.ndim - len(shape_tail) :]) != shape_tail or value.ndim < len(shape_tail):
        raise PBDError(f"{name} must have shape (..., {', '.join(map(str, shape_tail))}), got {tuple(value.shape)}")
    finite = torch.isfinite(value)
    if not bool(finite.all()):
        rows = (~finite).reshape(-1, *shape_tail).any(0).any(-1).nonzero().flatten().tolist()
        raise PBDError(f"{name} contains NaN or inf in row(s) {rows} of {shape_tail[0]}")


def check_state(model, state, label="state"):
    """Raise :class:`PBDError` unless ``state`` has the model's shapes, dtype, device and is finite."""
    count = model.nq + 1
    for field, width in (("pos", 3), ("quat", 4), ("vel", 3), ("omega", 3)):
        _check_tensor(f"{label}.{field}", getattr(state, field), model, (count, width))


def check_control(model, control):
    """Validated copy of ``control``: torques as a tensor of the model's dtype, all finite.

    Raises:
        RobotModelError: Bad torque shape/dtype or NaN/inf torques (the joints are named).
        PBDError: Bad or non-finite wrench.
    """
    tau = joint_tensor(model, "tau", control.tau)
    if control.wrench is not None:
        _check_tensor("wrench", control.wrench, model, (model.nq, 6))
    if control.target is None:
        if control.stiffness is not None or control.drive_damping is not None:
            raise PBDError("drive stiffness/damping given without a drive target")
        return PBDControl(tau=tau, wrench=control.wrench)
    target = joint_tensor(model, "target", control.target)
    gains = []
    for name in ("stiffness", "drive_damping"):
        value = getattr(control, name)
        value = torch.zeros_like(target) if value is None else joint_tensor(model, name, value)
        if bool((value < 0).any()):
            raise PBDError(f"drive {name} must be >= 0, got {value.tolist()}")
        gains.append(value)
    return PBDControl(tau=tau, wrench=control.wrench, target=target, stiffness=gains[0], drive_damping=gains[1])

"""Applied forces: joint torques, springs, external wrenches, and the friction split.

Joint torques act as equal and opposite wrenches on the two particles of a joint; spring
elements act through their generalized forces at the joint positions (a point spring's
force pair between two links is exactly its generalized force when the joints hold). Viscous
damping, the slope of the smoothed Coulomb friction and the diagonal of the springs' damping
are not forces here: they are implicit dashpot rows of the joint constraints
(:mod:`.constraints`), because Baxter's damping on its light wrist links has time constants
far below any practical substep.
"""

import torch

from diffsim_ros.dynamics.passive import DEFAULT_FRICTION_VELOCITY_SCALE
from diffsim_ros.dynamics.springs import spring_damping_split, spring_torques

__all__ = ["joint_torques", "body_wrenches", "friction_split", "spring_damping"]


def joint_torques(model, q, tau):
    """Applied joint torques plus the spring element torques at joint positions ``q``.

    Args:
        model: RobotModel (spring parameters).
        q: Joint positions [rad or m], shape (..., n) (None when the model has no springs).
        tau: Applied joint torques [N·m or N], shape (..., n).

    Returns:
        Joint torques [N·m or N], shape (..., n).
    """
    if not model.has_springs:
        return tau
    return tau + spring_torques(model, q)


def spring_damping(model, q, rate):
    """The springs' damping linearized like the friction: ``(explicit torque, slope)``, each (..., n).

    The slope (the diagonal of their damping matrix) joins the implicit dashpot rows; the
    explicit part (a point spring's coupling between joints) is evaluated at ``rate``, the
    joint rates at the substep start. Zeros without damped spring elements (torsion or
    point springs).
    """
    if not (model.torsion_joints or model.point_springs):
        zero = rate.new_zeros(())
        return zero, zero
    return spring_damping_split(model, q, rate)


def _scatter(joints, count, child_part, parent_part):
    """Sum per-joint child and parent contributions onto the N particles, shape (..., N, 3)."""
    shape = torch.broadcast_shapes(child_part.shape, parent_part.shape)
    zeros = child_part.new_zeros(*shape[:-2], count, shape[-1])
    out = zeros.index_add(-2, joints.child_index, child_part.expand(shape))
    return out.index_add(-2, joints.parent_index, parent_part.expand(shape))


def body_wrenches(joints, directions, tau, wrench=None):
    """Torques and forces on the particles from joint torques and external wrenches.

    Args:
        joints: PBDJoints.
        directions: JointDirections at the current poses.
        tau: Joint torques/forces [N·m or N], shape (..., n).
        wrench: Optional external ``[torque, force]`` on the n bodies, world axes, torque
            about each COM, shape (..., n, 6).

    Returns:
        ``(torque, force)`` on the N particles [N·m, N], each shape (..., N, 3).
    """
    count = joints.count + 1
    t = tau[..., None]
    torque = _scatter(joints, count, t * directions.ang_child, -t * directions.ang_parent)
    force = _scatter(joints, count, t * directions.lin, -t * directions.lin)
    if wrench is not None:
        pad = wrench.new_zeros(*wrench.shape[:-2], 1, 6)
        full = torch.cat([pad, wrench], dim=-2)
        torque = torque + full[..., :3]
        force = force + full[..., 3:]
    return torque, force


def friction_split(joints, rate):
    """Smoothed Coulomb friction linearized at the joint rate ``u0`` of the substep start.

    ``-mu tanh(u / v_s) ~ c0 - s u`` with slope ``s = mu / v_s (1 - tanh^2(u0 / v_s))`` and
    ``c0 = -mu tanh(u0 / v_s) + s u0``: the constant part is applied as an explicit joint
    torque, the slope joins the viscous damping in the implicit dashpot rows.

    Args:
        joints: PBDJoints (friction).
        rate: Joint rates at the substep start, shape (..., n).

    Returns:
        ``(constant torque [N·m or N], slope [N·m·s/rad or N·s/m])``, each (..., n).
    """
    scale = DEFAULT_FRICTION_VELOCITY_SCALE
    t = torch.tanh(rate / scale)
    slope = joints.friction / scale * (1.0 - t * t)
    return -joints.friction * t + slope * rate, slope

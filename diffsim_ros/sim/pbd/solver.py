"""The XPBD time step (Müller et al. 2020; Liu et al. Algorithm 1), in named phases.

One substep of length ``h``:

1. **forces**: joint torques, springs, the constant part of the linearized friction and
   external wrenches become particle wrenches; gravity and gyroscopic terms are added;
   velocities are integrated explicitly;
2. **prediction**: positions and rotation vectors advance with the new velocities;
3. **projection**: the joint rows (rigid rows + implicit damping rows, or limit rows for
   joints predicted beyond their limits) are projected by Gauss-Seidel, Jacobi or the
   direct solver;
4. **velocity update**: velocities are re-derived from the projected poses, angular ones
   from the accumulated rotation vector (paper Algorithm 1).

Position-based dynamics is a Störmer-Verlet scheme: the velocity it derives from positions
is the chord velocity of the last substep, half a substep behind the positions. A step
therefore starts with a half kick and ends with a closing half kick plus a velocity
projection (:func:`finish_velocities`), so that states at step boundaries hold velocities
at their own time and steps chain without losing second order.
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import matvec, quat_exp, quat_to_matrix
from diffsim_ros.sim.pbd.constraints import (
    apply_displacements,
    free_direction,
    joint_blocks,
    row_velocities,
    scaled_errors,
)
from diffsim_ros.sim.pbd.forces import body_wrenches, friction_split, joint_torques, spring_damping
from diffsim_ros.sim.pbd.frames import (
    child_rows,
    frame_coordinates,
    joint_directions,
    joint_frames,
    joint_rates,
    parent_rows,
    quat_mul,
)
from diffsim_ros.sim.pbd.projection import project_direct, project_gauss_seidel, project_jacobi, solve_direct
from diffsim_ros.sim.pbd.state import PBDState

__all__ = ["SolverSettings", "substep", "integrate", "finish_velocities"]

SOLVERS = ("jacobi", "gauss_seidel", "direct")


@dataclass(frozen=True)
class SolverSettings:
    """Numerical settings of the PBD step."""

    substeps: int = 10
    iterations: int = 2
    solver: str = "direct"
    compliance: float = 0.0
    """XPBD joint compliance [m/N, rad/(N·m)]; 0 = rigid joints."""
    limits: bool = True
    relaxation: float = 1.0
    """Jacobi over-relaxation of the averaged corrections."""

    def __post_init__(self):
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver '{self.solver}'; choose from {SOLVERS}")
        if int(self.substeps) < 1 or int(self.iterations) < 1:
            raise ValueError(f"substeps and iterations must be >= 1, got {self.substeps}, {self.iterations}")
        if not self.compliance >= 0.0:
            raise ValueError(f"compliance must be >= 0, got {self.compliance}")


@dataclass(frozen=True)
class _Pose:
    """Geometry of a state shared by the phases of one substep."""

    rot: torch.Tensor
    """Orientations, (..., N, 3, 3)."""
    frames: object
    """JointFrames."""
    q: torch.Tensor | None
    """Joint positions [rad or m], (..., n), when springs or limits need them."""


def _pose(model, system, state, control, settings):
    rot = quat_to_matrix(state.quat)
    frames = joint_frames(system.joints, state.pos, rot)
    needs_q = model.has_springs or control.has_drive or (settings.limits and system.joints.limited)
    return _Pose(rot=rot, frames=frames, q=frame_coordinates(system.joints, frames) if needs_q else None)


_KICKS = {"start": 0.5, "full": 1.0, "finish": 0.5}


def _accelerate(model, system, state, pose, control, h, phase, spin):
    """Phase 1: explicit forces and the implicit parts of damping and drives.

    ``phase`` is "start" (a half kick from velocities at the state's own time: the first
    substep), "full" (a full substep from the previous chord velocities, half a substep
    behind the poses) or "finish" (the closing half kick from the last chord velocities).
    The gyroscopic torque uses ``spin``, the angular velocity estimated at the state's time.
    Damping (viscous + drive + friction slope + the springs' diagonal) is trapezoidal (second order, A-stable) over
    full substeps and backward Euler over half kicks; a drive's stiffness uses Newmark's
    average acceleration, explicit on the closing kick, where the poses are known.

    Returns:
        ``(vel, omega, inv_inertia_w, implicit damping (..., n), joint rates before the kick
        (..., n), implicit drive or None)``; the drive is ``(stiffness, error)`` for :func:`joint_blocks`.
    """
    bodies, joints = system.bodies, system.joints
    kick = _KICKS[phase]
    rot_t = pose.rot.transpose(-1, -2)
    inertia_w = pose.rot @ bodies.inertia @ rot_t
    inv_inertia_w = pose.rot @ bodies.inv_inertia @ rot_t
    directions = joint_directions(joints, pose.frames)
    rate = joint_rates(joints, directions, state.vel, state.omega)
    friction, slope = friction_split(joints, rate)
    # A point spring's damping couples joints explicitly: at the rates of the state's time
    # (from ``spin``; second order for revolute joints), not the chords half a substep behind.
    now = joint_rates(joints, directions, state.vel, spin) if model.point_springs else rate
    explicit, spring_slope = spring_damping(model, pose.q, now)
    damping = joints.damping + slope + spring_slope
    tau = joint_torques(model, pose.q, control.tau) + friction + explicit
    drive = None
    if control.has_drive:
        damping = damping + control.drive_damping
        error = pose.q - control.target
        stiffness = control.stiffness
        if phase == "finish":
            # (F_prev + F_now) / 2: with the next step's first half kick this composes to
            # exactly the interior Newmark update, so restarts keep it stable.
            tau = tau - stiffness * (error - 0.5 * h * rate)
        else:
            # Newmark average acceleration (second order, unconditionally stable): the
            # spring force over a full substep is (F_prev + 2 F_now + F_next) / 4, F_prev
            # from the chord rate; the first half kick uses (F_now + F_next) / 2.
            drive = (0.25 * stiffness, error)
            if phase == "full":
                tau = tau - stiffness * (0.75 * error - 0.25 * h * rate)
            else:
                tau = tau - 0.5 * stiffness * error
    if phase == "full":
        tau = tau - 0.5 * damping * rate
    torque, force = body_wrenches(joints, directions, tau, control.wrench)
    gravity = bodies.dynamic[:, None] * system.gravity
    vel = state.vel + (kick * h) * (gravity + bodies.inv_mass[:, None] * force)
    gyroscopic = torch.cross(spin, matvec(inertia_w, spin), dim=-1)
    omega = state.omega + (kick * h) * matvec(inv_inertia_w, torque - gyroscopic)
    return vel, omega, inv_inertia_w, 0.5 * damping, rate, drive


def _active_limits(system, pose, free, move, phi):
    """Joints whose predicted position leaves the limits, and the displacement onto the limit.

    The predicted displacement is the first-order one along the free direction (exact for
    revolute joints: the relative rotation about the axis).

    Returns:
        ``(active (..., n) bool, target (..., n) [rad or m])``.
    """
    joints = system.joints
    turn = (free[..., 3:] * (child_rows(phi) - parent_rows(joints, phi))).sum(-1)
    if not joints.all_revolute:
        slide = (free[..., :3] * (child_rows(move) - parent_rows(joints, move))).sum(-1)
        turn = torch.where(joints.revolute_mask, turn, slide)
    predicted = pose.q + turn
    clamped = torch.minimum(torch.maximum(predicted, joints.lower), joints.upper)
    return predicted != clamped, clamped - pose.q


def substep(model, system, state, control, h, settings, phase="full", spin=None):
    """Advance the particle state by one substep ``h`` [s] (phases 1-4).

    Args:
        model: RobotModel (spring parameters).
        system: PBDSystem of the model.
        state: PBDState, batch shape (...).
        control: PBDControl (validated), broadcastable to the state's batch.
        h: Substep [s].
        settings: SolverSettings.
        phase: "start" when ``state`` holds velocities at its own time (first substep of a
            step), "full" when it holds the previous substep's chord velocities.
        spin: Angular velocities at the state's time [rad/s], shape (..., N, 3) (default
            ``state.omega``).

    Returns:
        New PBDState whose velocities are the chord velocities of this substep.
    """
    spin = state.omega if spin is None else spin
    pose = _pose(model, system, state, control, settings)
    vel, omega, inv_inertia_w, damping, rate, drive = _accelerate(model, system, state, pose, control, h, phase, spin)
    move, phi = h * vel, h * omega
    limit = None
    if settings.limits and system.joints.limited:
        free = free_direction(system.joints, pose.frames.axis_c)
        limit = _active_limits(system, pose, free, move, phi)
    blocks = joint_blocks(system, pose.frames, pose.rot, inv_inertia_w, damping, rate, settings.compliance, h, limit, drive)
    pos = state.pos + move
    if settings.solver == "gauss_seidel":
        pos, phi = project_gauss_seidel(system, blocks, pos, phi, settings.iterations)
    elif settings.solver == "direct":
        pos, phi = project_direct(system, blocks, pos, phi, settings.iterations)
    else:
        pos, phi = project_jacobi(system, blocks, pos, phi, settings.iterations, settings.relaxation)
    # Chord velocities; the rotation vector phi is the exact rotation of the substep
    # (paper Algorithm 1's quaternion difference with its sign fixed, without its
    # small-angle approximation).
    quat = quat_mul(quat_exp(phi), state.quat)
    return PBDState(pos=pos, quat=quat, vel=(pos - state.pos) / h, omega=phi / h)


def integrate(model, system, state, control, dt, settings):
    """Advance by ``dt`` [s] in ``settings.substeps`` substeps with the control held.

    Returns:
        PBDState at the end of the step, with velocities at that time.
    """
    h = dt / settings.substeps
    start, previous, last = state.omega, None, None
    for index in range(settings.substeps):
        spin = _spin(start, previous, last)
        state = substep(model, system, state, control, h, settings, "start" if index == 0 else "full", spin)
        previous, last = last, state.omega
    return finish_velocities(model, system, state, control, h, _spin(start, previous, last), settings)


def _spin(start, previous, last):
    """Angular velocity at the current time, O(h^2), from the start velocity and the chords.

    No chord yet: the start velocity; one chord: ``2 w_1/2 - w_0``; otherwise
    ``1.5 w_last - 0.5 w_previous``.
    """
    if last is None:
        return start
    if previous is None:
        return 2.0 * last - start
    return 1.5 * last - 0.5 * previous


def finish_velocities(model, system, state, control, h, spin, settings=SolverSettings()):
    """Velocities at the end of a step from the last chord velocities (RATTLE half kick).

    A half kick of the explicit forces at the final poses, then a velocity projection onto
    the joint constraints (rigid rows: zero relative velocity; free rows: implicit damping
    over h/2, plus the armature's momentum), solved directly. Restarting the next step from these velocities continues
    the leapfrog exactly, so steps can be chained (and joint states round-tripped) without
    losing second order.

    Args:
        model: RobotModel.
        system: PBDSystem.
        state: PBDState after the last substep (chord velocities).
        control: PBDControl.
        h: Substep [s].
        spin: Angular velocities estimated at the final time [rad/s], shape (..., N, 3).
        settings: SolverSettings (whether springs need joint positions for limits).

    Returns:
        PBDState with velocities at its own time.
    """
    pose = _pose(model, system, state, control, settings)
    vel, omega, inv_inertia_w, damping, chord_rate, _ = _accelerate(model, system, state, pose, control, h, "finish", spin)
    blocks = joint_blocks(system, pose.frames, pose.rot, inv_inertia_w, damping, chord_rate, 0.0, h)
    rows = row_velocities(system, blocks, vel, omega)
    rate = (blocks.free * rows).sum(-1)
    # Rows at the velocity level: the positional offset (the armature's a h rate) over h.
    rhs = scaled_errors(blocks.free, blocks.row_scale, rows, rate) - blocks.free * (blocks.offset / h)[..., None]
    _, delta_c, delta_p = solve_direct(system, blocks, rhs)
    vel, omega = apply_displacements(system, vel, omega, delta_c, delta_p)
    return state.replace(vel=vel, omega=omega)

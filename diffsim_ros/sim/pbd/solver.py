"""The XPBD time step (Müller et al. 2020; Liu et al. Algorithm 1), in named phases.

One substep of length ``h``:

1. **forces**: joint torques, springs, the constant part of the linearized friction and
   external wrenches become particle wrenches; gravity and gyroscopic terms are added;
   velocities are integrated explicitly;
2. **prediction**: positions and rotation vectors advance with the new velocities;
3. **projection**: the joint rows (rigid rows + implicit damping rows) are projected by
   Gauss-Seidel, Jacobi or the direct solver, then joint limits;
4. **velocity update**: velocities are re-derived from the projected poses, angular ones
   from the accumulated rotation vector (paper Algorithm 1).
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import matvec, quat_to_matrix
from diffsim_ros.sim.pbd.constraints import joint_blocks, orient, row_velocities, scaled_errors
from diffsim_ros.sim.pbd.forces import body_wrenches, friction_split, joint_torques
from diffsim_ros.sim.pbd.frames import joint_directions, joint_rates
from diffsim_ros.sim.pbd.projection import (
    project_direct,
    project_gauss_seidel,
    project_jacobi,
    project_limits,
    solve_direct,
)
from diffsim_ros.sim.pbd.state import PBDState

__all__ = ["SolverSettings", "world_inertias", "substep", "integrate", "finish_velocities"]

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


def world_inertias(bodies, quat):
    """World-frame inertia and inverse inertia of every particle, each (..., N, 3, 3)."""
    rot = quat_to_matrix(quat)
    rot_t = rot.transpose(-1, -2)
    return rot @ bodies.inertia @ rot_t, rot @ bodies.inv_inertia @ rot_t


def _accelerate(model, system, state, control, h, kick, spin):
    """Phase 1: explicit forces; returns (vel, omega, inv_inertia_w, implicit damping (..., n)).

    ``kick`` scales the velocity change: 1 for a full substep from the previous chord
    velocities (half a substep behind the poses), 1/2 for a half kick from velocities at
    the state's own time (start and end of a step, velocity Verlet). The gyroscopic torque
    uses ``spin``, the angular velocity estimated at the state's time (extrapolated from
    the chords, which include the constraint torques). With ``kick = 1`` joint damping is
    trapezoidal (second order, A-stable) between the chord rates before and after; the
    implicit half is returned for the dashpot rows.
    """
    bodies, joints = system.bodies, system.joints
    inertia_w, inv_inertia_w = world_inertias(bodies, state.quat)
    directions = joint_directions(joints, state.pos, state.quat)
    rate = joint_rates(joints, directions, state.vel, state.omega)
    friction, slope = friction_split(joints, rate)
    damping = joints.damping + slope
    tau = joint_torques(model, joints, state.pos, state.quat, control.tau) + friction
    if kick == 1.0:
        tau = tau - 0.5 * damping * rate
    torque, force = body_wrenches(joints, directions, tau, control.wrench)
    gravity = bodies.dynamic[:, None] * system.gravity
    vel = state.vel + (kick * h) * (gravity + bodies.inv_mass[:, None] * force)
    gyroscopic = torch.cross(spin, matvec(inertia_w, spin), dim=-1)
    omega = state.omega + (kick * h) * matvec(inv_inertia_w, torque - gyroscopic)
    return vel, omega, inv_inertia_w, 0.5 * damping


def substep(model, system, state, control, h, settings, kick=1.0, spin=None):
    """Advance the particle state by one substep ``h`` [s] (phases 1-4).

    Args:
        model: RobotModel (spring parameters).
        system: PBDSystem of the model.
        state: PBDState, batch shape (...).
        control: PBDControl (validated), broadcastable to the state's batch.
        h: Substep [s].
        settings: SolverSettings.
        kick: 0.5 when ``state`` holds velocities at its own time (first substep), 1 when
            it holds the previous substep's chord velocities.
        spin: Angular velocities at the state's time [rad/s], shape (..., N, 3) (default
            ``state.omega``).

    Returns:
        New PBDState whose velocities are the chord velocities of this substep.
    """
    spin = state.omega if spin is None else spin
    vel, omega, inv_inertia_w, damping = _accelerate(model, system, state, control, h, kick, spin)
    blocks = joint_blocks(system, state, inv_inertia_w, damping, settings.compliance, h)
    pos, phi = state.pos + h * vel, h * omega
    if settings.solver == "gauss_seidel":
        pos, phi = project_gauss_seidel(system, blocks, pos, phi, settings.iterations)
    elif settings.solver == "direct":
        pos, phi = project_direct(system, blocks, pos, phi, settings.iterations)
    else:
        pos, phi = project_jacobi(system, blocks, pos, phi, settings.iterations, settings.relaxation)
    if settings.limits and system.joints.limited:
        pos, phi = project_limits(system, blocks, pos, phi)
    # Chord velocities; the rotation vector phi is the exact rotation of the substep
    # (paper Algorithm 1's quaternion difference with its sign fixed, without its
    # small-angle approximation).
    return PBDState(pos=pos, quat=orient(state.quat, phi), vel=(pos - state.pos) / h, omega=phi / h)


def integrate(model, system, state, control, dt, settings):
    """Advance by ``dt`` [s] in ``settings.substeps`` substeps with the control held.

    Position-based dynamics is a Störmer-Verlet scheme: the velocity it derives from
    positions is the chord velocity of the last substep, half a substep behind the
    positions. To start and end on velocities *at* the step boundaries (what the joint-space
    API and a new control period need), the first substep takes a half kick and the final
    velocities come from a closing half kick (:func:`finish_velocities`).
    """
    h = dt / settings.substeps
    start, previous, last = state.omega, None, None
    for index in range(settings.substeps):
        spin = _spin(start, previous, last)
        state = substep(model, system, state, control, h, settings, 0.5 if index == 0 else 1.0, spin)
        previous, last = last, state.omega
    return finish_velocities(model, system, state, control, h, _spin(start, previous, last))


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


def finish_velocities(model, system, state, control, h, spin):
    """Velocities at the end of a step from the last chord velocities (RATTLE half kick).

    A half kick of the explicit forces at the final poses, then a velocity projection onto
    the joint constraints (rigid rows: zero relative velocity; free rows: implicit damping
    over h/2), solved directly. Restarting the next step from these velocities continues
    the leapfrog exactly, so steps can be chained (and joint states round-tripped) without
    losing second order.

    Args:
        model: RobotModel.
        system: PBDSystem.
        state: PBDState after the last substep (chord velocities).
        control: PBDControl.
        h: Substep [s].
        spin: Angular velocities estimated at the final time [rad/s], shape (..., N, 3).

    Returns:
        PBDState with velocities at its own time.
    """
    vel, omega, inv_inertia_w, damping = _accelerate(model, system, state, control, h, 0.5, spin)
    blocks = joint_blocks(system, state, inv_inertia_w, damping, 0.0, h)
    rows = row_velocities(system, blocks, vel, omega)
    rate = (blocks.free * rows).sum(-1)
    _, delta = solve_direct(system, blocks, scaled_errors(blocks.free, blocks.beta, rows, rate))
    return state.replace(vel=vel + delta[..., :3], omega=omega + delta[..., 3:])

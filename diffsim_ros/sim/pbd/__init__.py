"""Differentiable articulated position-based dynamics (Liu et al.; XPBD of Müller et al. 2020).

Phases and modules: :mod:`.bodies` (particles and joints from a RobotModel), :mod:`.state`
(PBDState / PBDControl), :mod:`.frames` (joint geometry on particle states),
:mod:`.forces` (torques, springs, wrenches, implicit damping), :mod:`.constraints` (XPBD
joint constraints, Gauss-Seidel and Jacobi projections, limits), :mod:`.solver` (the
substep), :mod:`.mapping` (joint space <-> particles), :mod:`.simulator` (PBDSimulator),
:mod:`.fast` (the same step compiled for rollouts without gradient) and :mod:`.statics`
(holding torques through any simulator).
"""

from diffsim_ros.sim.pbd.bodies import FreeBase, PBDBodies, PBDJoints, PBDSystem, build_system
from diffsim_ros.sim.pbd.constraints import constraint_residuals
from diffsim_ros.sim.pbd.errors import PBDConvergenceWarning, PBDError
from diffsim_ros.sim.pbd.mapping import joint_positions, joint_velocities, joints_from_state, state_from_joints
from diffsim_ros.sim.pbd.simulator import PBDSimulator
from diffsim_ros.sim.pbd.solver import SolverSettings
from diffsim_ros.sim.pbd.state import PBDControl, PBDState
from diffsim_ros.sim.pbd.statics import static_torques

__all__ = [
    "FreeBase",
    "PBDBodies",
    "PBDControl",
    "PBDConvergenceWarning",
    "PBDError",
    "PBDJoints",
    "PBDSimulator",
    "PBDState",
    "PBDSystem",
    "SolverSettings",
    "build_system",
    "constraint_residuals",
    "static_torques",
    "joint_positions",
    "joint_velocities",
    "joints_from_state",
    "state_from_joints",
]

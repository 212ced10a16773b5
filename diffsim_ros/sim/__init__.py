"""Simulators: the PBD/XPBD articulated simulator, contact, and the rigid-body reference."""

from diffsim_ros.sim.base import JointSpaceSimulator
from diffsim_ros.sim.rigid import RigidBodySimulator
from diffsim_ros.sim.factory import SIMULATOR_KINDS, make_simulator, steps_per_sample
from diffsim_ros.sim.pbd import (
    FreeBase,
    PBDControl,
    PBDConvergenceWarning,
    PBDError,
    PBDSimulator,
    PBDState,
    joints_from_state,
    state_from_joints,
)

__all__ = [
    "JointSpaceSimulator",
    "SIMULATOR_KINDS",
    "make_simulator",
    "steps_per_sample",
    "RigidBodySimulator",
    "FreeBase",
    "PBDControl",
    "PBDConvergenceWarning",
    "PBDError",
    "PBDSimulator",
    "PBDState",
    "joints_from_state",
    "state_from_joints",
]

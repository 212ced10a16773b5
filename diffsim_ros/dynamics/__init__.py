"""Exact rigid-body algorithms on :class:`~diffsim_ros.model.RobotModel` (torch, batched, differentiable)."""

from diffsim_ros.dynamics.aba import aba, forward_dynamics
from diffsim_ros.dynamics.crba import crba, mass_matrix
from diffsim_ros.dynamics.energy import kinetic_energy, potential_energy
from diffsim_ros.dynamics.kinematics import body_placements, forward_kinematics, frame_jacobian
from diffsim_ros.dynamics.passive import damping_torques, friction_torques, passive_torques
from diffsim_ros.dynamics.rnea import coriolis_torques, gravity_torques, nonlinear_effects, rnea
from diffsim_ros.dynamics.springs import (
    point_spring_lengths,
    spring_damping_split,
    spring_lengths,
    spring_potential_energy,
    spring_torques,
)

__all__ = [
    "aba",
    "body_placements",
    "coriolis_torques",
    "crba",
    "damping_torques",
    "forward_dynamics",
    "forward_kinematics",
    "frame_jacobian",
    "friction_torques",
    "gravity_torques",
    "kinetic_energy",
    "mass_matrix",
    "nonlinear_effects",
    "passive_torques",
    "point_spring_lengths",
    "potential_energy",
    "rnea",
    "spring_damping_split",
    "spring_lengths",
    "spring_potential_energy",
    "spring_torques",
]

"""Simulators: the PBD/XPBD articulated simulator, contact, and the rigid-body reference."""

from diffsim_ros.sim.base import JointSpaceSimulator, RigidBodySimulator

__all__ = ["JointSpaceSimulator", "RigidBodySimulator"]

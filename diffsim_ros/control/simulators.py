"""The simulator the controllers predict with, unless the caller passes one."""

from diffsim_ros.sim.base import RigidBodySimulator

__all__ = ["default_simulator"]


def default_simulator(model, dt=0.01, substeps=1):
    """The default differentiable JointSpaceSimulator for torque maps and MPC.

    Args:
        model: RobotModel (its dtype and device are used).
        dt: Step [s] (paper: 0.01 s).
        substeps: Integration substeps per step.

    Returns:
        JointSpaceSimulator.
    """
    return RigidBodySimulator(model, dt, substeps=substeps)

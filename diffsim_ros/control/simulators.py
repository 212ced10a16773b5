"""The simulators the controllers predict with: the PBD simulator by default, or the rigid-body reference.

Both are differentiable JointSpaceSimulators (torch autograd). Measured on the Baxter arm
(benchmarks/RESULTS.md): the PBD simulator with its default 10 substeps builds torque maps
that match direct optimization to ~0.02 N·m but costs ~100 ms per single step; the
rigid-body simulator costs ~4 ms per step, which is what makes MPC reach 50 Hz.
"""

from diffsim_ros.control.errors import ControlError
from diffsim_ros.sim.factory import SIMULATOR_KINDS, make_simulator

__all__ = ["SIMULATOR_KINDS", "default_simulator", "mpc_simulator"]


def default_simulator(model, dt=0.01, substeps=None, kind="pbd"):
    """A differentiable JointSpaceSimulator for torque maps and MPC.

    Args:
        model: RobotModel (its dtype and device are used).
        dt: Step [s] (paper: 0.01 s).
        substeps: Substeps per step (default: 10 for PBD, 1 for the rigid-body simulator).
        kind: ``"pbd"`` (Liu et al.'s articulated PBD) or ``"rigid"`` (exact rigid-body
            dynamics, semi-implicit Euler with implicit damping).

    Returns:
        JointSpaceSimulator.

    Raises:
        ControlError: Unknown kind.
    """
    if kind not in SIMULATOR_KINDS:
        raise ControlError(f"unknown simulator '{kind}'; choose from {SIMULATOR_KINDS}")
    return make_simulator(model, dt, kind, substeps)


def mpc_simulator(model, dt=0.01, kind="rigid"):
    """The prediction simulator for real-time MPC: one substep, rigid-body by default.

    Through these simulators in torch, the reference MPC runs at ~3-13 Hz (PBD) and ~20 Hz
    (rigid) on the Baxter arm; :func:`~diffsim_ros.control.mpc_fast.make_mpc` solves the same
    problem in compiled code, at kHz rates with the rigid step (benchmarks/RESULTS.md, "mpc").
    """
    return default_simulator(model, dt, substeps=1, kind=kind)

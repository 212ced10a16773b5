"""The one simulator factory: a JointSpaceSimulator by kind, for identification, torque maps and MPC.

Both kinds are differentiable (torch autograd). Measured on the Baxter arm
(benchmarks/RESULTS.md): the PBD simulator with its default 10 substeps builds torque maps
that match direct optimization to ~0.02 N·m but costs ~100 ms per single step; the
rigid-body simulator costs ~4 ms per step. Real-time MPC predicts with one substep
(``substeps=1``), rigid by default; :func:`~diffsim_ros.control.mpc_fast.make_mpc` solves it
in compiled code.
"""

from diffsim_ros.sim.rigid import RigidBodySimulator
from diffsim_ros.sim.pbd import PBDSimulator

__all__ = ["SIMULATOR_KINDS", "make_simulator", "steps_per_sample"]

SIMULATOR_KINDS = ("pbd", "rigid")


def make_simulator(model, dt=0.01, kind="pbd", substeps=None):
    """A differentiable JointSpaceSimulator.

    Args:
        model: RobotModel (its dtype and device are used).
        dt: Step [s] (paper: 0.01 s).
        kind: ``"pbd"`` (Liu et al.'s articulated PBD) or ``"rigid"`` (exact rigid-body
            dynamics, semi-implicit Euler with implicit damping).
        substeps: Substeps per step (default: 10 for PBD, 1 for the rigid-body simulator).

    Raises:
        ValueError: Unknown kind.
    """
    if kind == "pbd":
        return PBDSimulator(model, dt, substeps=10 if substeps is None else substeps)
    if kind == "rigid":
        return RigidBodySimulator(model, dt, substeps=1 if substeps is None else substeps)
    raise ValueError(f"unknown simulator '{kind}'; choose from {SIMULATOR_KINDS}")


def steps_per_sample(sample_dt, max_step):
    """Simulator steps per sample period so that each step is at most ``max_step`` [s]."""
    import math

    return max(1, math.ceil(float(sample_dt) / float(max_step) - 1e-6))  # clock rounding is not a step

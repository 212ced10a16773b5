"""Compile the numba kernels ahead of use: ``python -m diffsim_ros.pipelines.kernels``.

numba compiles a kernel at its first call and keeps the machine code in ``__pycache__`` beside
the source (``cache=True``); later processes load it in milliseconds. On a fresh install the
first calls cost minutes of CPU (the PBD step, in real arithmetic and with its forward-mode tangents,
most). A node would spend them at start-up on the robot, and each worker of
``make test`` would spend them again for the same kernels. This calls each kernel family once,
on the Baxter arm and a box on the ground, in parallel processes, so that every later process
loads them from the cache (a controller node's own kernels, ``control``, took ~30 s of CPU at
its first cycle before they were a family here).

Each family that ran is marked current in the cache (:mod:`diffsim_ros.runtime.warmup`); a node
starting with a family not current compiles it in a child process, ``--warm-up <node pid>``:
the stale families one after another in that process, which dies with the node.
"""

import argparse
import ctypes
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

__all__ = ["FAMILIES", "compile_kernels", "main"]

_DT = 0.01  # [s]


def _baxter():
    """The model the nodes load by default (the Baxter left arm)."""
    from diffsim_ros.nodes.robot import DEFAULT_ROBOT_CONFIG, load_robot

    return load_robot(DEFAULT_ROBOT_CONFIG).nominal


def _start(model):
    import numpy as np

    q = 0.5 * (model.lower.numpy() + model.upper.numpy())
    return q, np.full(model.nq, 0.1), np.full(model.nq, 0.5)


def _pbd():
    """The compiled PBD rollout (batched) on one thread, the default of the nodes and the command line
    (``threads.py``); its kernel with one rollout per thread compiles at its first call with more."""
    import numpy as np
    import torch

    from diffsim_ros.sim import make_simulator
    from diffsim_ros.threads import set_threads

    set_threads(1)
    model = _baxter()
    q, qd, tau = (torch.from_numpy(np.tile(x, (2, 1))) for x in _start(model))
    with torch.no_grad():
        make_simulator(model, _DT, kind="pbd").rollout(q, qd, tau[:, None].repeat(1, 2, 1))


def _mpc(model, q, qd, **simulator):
    """One MPC call on ``make_simulator(model, **simulator)`` (the solver ``make_mpc`` picks for it)."""
    from diffsim_ros.control.mpc import MPCSettings
    from diffsim_ros.control.mpc_fast import make_mpc
    from diffsim_ros.control.references import SetPoint
    from diffsim_ros.sim import make_simulator

    make_mpc(make_simulator(model, _DT, **simulator), SetPoint(q), MPCSettings()).compute(0.0, q, qd)


def _pbd_mpc():
    """The MPC through PBD, the PBD step's exact Jacobians (forward-mode tangents) called alone,
    and its parameter tangents (the identification's PBD Jacobians).

    One family: all call the one compiled tangent step (``fast_tangents.step_tangents_core``),
    which the first compiles and the others link.
    """
    import numpy as np

    from diffsim_ros.sim import PBDSimulator
    from diffsim_ros.sim.pbd.fast import FastPBD
    from diffsim_ros.sim.pbd.fast_jacobians import parameter_tensors, pbd_rollout_parameter_tangents, pbd_step_jacobians

    model = _baxter()
    q, qd, tau = _start(model)
    _mpc(model, q, qd, kind="pbd", substeps=1)
    pbd, settings = FastPBD.from_model(model), PBDSimulator(model, _DT).settings
    pbd_step_jacobians(pbd, q, qd, tau, _DT, settings)
    seeds = [np.zeros((1, *t.shape)) for t in parameter_tensors(model)[0]]
    state = np.zeros((1, 1, model.nq))
    pbd_rollout_parameter_tangents(pbd, _DT, settings, seeds, np.asarray(q)[None], np.asarray(qd)[None], state, state,
                                   np.asarray(tau)[None, None], state[:, None])


def _rigid():
    """The rigid-body step with its state, torque and parameter Jacobians, the MPC on it, and the
    joint-torque regressor of the rigid estimators (batch and streaming)."""
    from diffsim_ros.dynamics.regressor import joint_torque_regressor
    from diffsim_ros.sim.rigid_fast import FastRigidStep

    model = _baxter()
    q, qd, tau = _start(model)
    FastRigidStep(model, _DT).jacobians(q, qd, tau, parameters=True)
    _mpc(model, q, qd, kind="rigid")
    joint_torque_regressor(model, q, qd, tau)


def _large_step():
    """The large-step (SDIRK) integrator's rollout."""
    import numpy as np

    from diffsim_ros.sim.large_step import SDIRKStep

    model = _baxter()
    q, qd, _ = _start(model)
    SDIRKStep(model, 0.1).rollout(q, qd, np.zeros((2, model.nq)))


def _contact():
    """The compiled cone contact step and its Jacobians (a box sliding on the ground)."""
    from diffsim_ros.sim.contact import Box, ContactWorld, RigidObject
    from diffsim_ros.sim.contact.fast import FastContactStep

    box = RigidObject("box", Box((0.05, 0.05, 0.04)), mass=0.5, friction=0.3)
    world = ContactWorld.create([box], solver="cone", dt=_DT)
    state = world.initial_state(position=[[0.0, 0.0, 0.04]], linear_velocity=[[1.0, 0.3, 0.0]])
    fast = FastContactStep(world)
    args = (state.position, state.orientation, state.linear_velocity, state.angular_velocity)
    fast.step(*args)
    fast.jacobians(*args)


def _control():
    """A controller node's first cycles: the compiled dynamics (RNEA, gravity, springs, M(q) for
    the damping limit) under gravity compensation and impedance, and the safety layer."""
    from diffsim_ros.control import GravityCompensation, JointImpedanceController, SetPoint
    from diffsim_ros.control.loop import ControlLoop
    from diffsim_ros.control.safety import SafetyLayer

    model = _baxter()
    q, qd, _ = _start(model)
    impedance = JointImpedanceController(model, 10.0, 1.0, SetPoint(q), state_period=_DT)
    for controller in (GravityCompensation(model), impedance):
        loop = ControlLoop(controller, SafetyLayer(model), model)
        for k in range(3):
            loop.step(k * _DT, q, qd, k * _DT)


FAMILIES = {"pbd_mpc": _pbd_mpc, "pbd": _pbd, "contact": _contact, "rigid": _rigid, "large_step": _large_step,
            "control": _control}
"""Kernel families, the costliest first (they are handed out in this order; CPU on a cold cache,
each alone under load, benchmarks/bench_compile.py: ~390, 210, 170, 140, 120 and 30 s)."""


def _compile(name, only_stale=False):
    """Run family ``name`` (compiling or loading its kernels) and mark it current; ``only_stale``:
    not if another process compiled it meanwhile."""
    from diffsim_ros.runtime.warmup import family_lock, mark_current, stale_families  # after _warm_up's first lines

    start = time.process_time()
    with family_lock(name):
        stale = stale_families([name])  # the fingerprints are fixed when first computed (here or at import), before
        if stale or not only_stale:  # any compile: sources edited meanwhile leave the marker stale, not falsely current
            FAMILIES[name]()
            mark_current(name)
    return name, time.process_time() - start


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _warm_up(names, parent):
    """A node's warm-up child: the stale families of ``names`` in this process; ends with ``parent``.

    The death signal is set before anything of the package is imported (seconds on a busy machine).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a terminal's Ctrl-C reaches the group: end quietly
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the node ended before the line above
        return
    for name in names:
        _compile(name, only_stale=True)


def compile_kernels(families=None, jobs=2):
    """Call each kernel family once, ``jobs`` processes at a time.

    Args:
        families: Names from :data:`FAMILIES` (default: all).
        jobs: Parallel processes.

    Returns:
        ``{family: CPU seconds}`` (compiling, or loading from the cache when it is warm).
    """
    names = list(FAMILIES) if families is None else list(families)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown kernel families {unknown}; known: {sorted(FAMILIES)}")
    with ProcessPoolExecutor(max_workers=max(1, int(jobs)), mp_context=get_context("spawn")) as pool:
        return dict(pool.map(_compile, names))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m diffsim_ros.pipelines.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes (default: the cores)")
    parser.add_argument("--warm-up", type=int, metavar="PID", help="a node's warm-up: compile the stale families "
                        "one after another in this process, which ends with process PID")
    parser.add_argument("--nice", type=int, default=0, help="CPU niceness to run at (0-19)")
    parser.add_argument("families", nargs="*", help=f"of {', '.join(FAMILIES)} (default: all)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown kernel families {unknown}; known: {sorted(FAMILIES)}")
    if not 0 <= args.nice <= 19:
        parser.error(f"--nice must be in 0..19, got {args.nice}")
    os.nice(args.nice)
    if args.warm_up is not None:
        _warm_up(args.families or list(FAMILIES), args.warm_up)
        return 0
    start = time.monotonic()
    seconds = compile_kernels(args.families or None, args.jobs)
    for name, cpu in seconds.items():
        print(f"numba kernels {name}: {cpu:.1f} s CPU", file=sys.stderr)
    print(f"numba kernels ready in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

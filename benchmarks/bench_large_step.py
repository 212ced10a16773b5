"""Large time steps on the Baxter arm: the SDIRK integrator vs the package's steps and MuJoCo RK4 (issue 17).

Scenario: Baxter's left arm (lever spring, joint damping 0.7 N·m·s/rad, no friction, joint
limits off) released with zero motor torque 0.3 rad away from its hanging equilibrium, 5 s.
Reference: MuJoCo RK4 at dt = 1e-4 s on the package's MuJoCo plant (lever spring as an
applied force per step, as that plant does); the package's implicit-Euler step at 1e-4 s is
shown against it as a check that both describe the same arm. Each integrator then runs at
dt = 0.1, 0.05 and 0.01 s: largest joint error at 5 s, largest speed on the way (blow-up),
largest energy rise over one step (a passive damped arm never gains energy) and wall time
per step (per Python call for the MuJoCo plant and the rigid step; the SDIRK rollout is
one compiled call).

Run: ``.venv/bin/python -m benchmarks.bench_large_step``.
"""

import argparse
import os
import time

import numpy as np
import torch

from benchmarks.common import load_note, machine_line, markdown_table, write_section
from diffsim_ros import dynamics as dyn
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim.large_step import SDIRKStep
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, SensorNoise
from diffsim_ros.sim.rigid_fast import FastRigidStep
from oracles import BAXTER_LEFT, BAXTER_URDF

SECONDS = 5.0
STEPS = (0.1, 0.05, 0.01)
REFERENCE_DT = 1e-4
Q_EQ = np.array([-0.0036, 2.5808, -3.1440, 0.9972, 0.0593, -0.0612, -0.0112])  # as test/test_large_step.py
Q0 = Q_EQ + 0.3


def mujoco_rollout(model, dt):
    import mujoco

    plant = MujocoPlant(model, BAXTER_URDF, timestep=dt, noise=SensorNoise(0, 0, 0, 0, 0))
    plant.mj_model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    plant.mj_model.jnt_limited[:] = 0
    plant.reset(Q0, np.zeros(7))
    qs, vs = [], []
    for _ in range(int(round(SECONDS / dt))):
        plant.step(np.zeros(7))
        q, v = plant.true_state()
        qs.append(q)
        vs.append(v)
    return np.array(qs), np.array(vs)


def rigid_rollout(model, dt):
    step = FastRigidStep(model, dt, parameters=())
    q, v, qs, vs = Q0.copy(), np.zeros(7), [], []
    for _ in range(int(round(SECONDS / dt))):
        q, v = step.step(q, v, np.zeros(7))
        qs.append(q)
        vs.append(v)
        if not np.all(np.isfinite(q)):
            break
    return np.array(qs), np.array(vs)


def sdirk_rollout(model, dt):
    return SDIRKStep(model, dt).rollout(Q0, np.zeros(7), np.zeros((int(round(SECONDS / dt)), 7)))


def _energy(model, qs, vs):
    q = torch.as_tensor(np.vstack([Q0, qs]))
    qd = torch.as_tensor(np.vstack([np.zeros(7), vs]))
    return (dyn.kinetic_energy(model, q, qd) + dyn.potential_energy(model, q) + dyn.spring_potential_energy(model, q)).numpy()


def _row(name, dt, model, rollout, reference):
    start = time.perf_counter()
    try:
        qs, vs = rollout(model, dt)
        failure = ""
    except (ArithmeticError, ValueError) as err:
        qs, vs, failure = np.empty((0, 7)), np.empty((0, 7)), f"{type(err).__name__}: {err}"
    seconds = (time.perf_counter() - start) / max(1, int(round(SECONDS / dt)))
    finite = len(qs) == int(round(SECONDS / dt)) and np.all(np.isfinite(qs)) and np.all(np.isfinite(vs))
    if not finite:
        return [name, dt, failure or "diverged (non-finite state)", "-", "-", f"{seconds * 1e6:.0f}"]
    rise = float(np.diff(_energy(model, qs, vs)).max())
    return [name, dt, f"{np.abs(qs[-1] - reference).max():.2e}", f"{np.abs(vs).max():.2f}", f"{rise:.2e}", f"{seconds * 1e6:.0f}"]


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, not a run
    start = time.perf_counter()
    load = os.getloadavg()[0]
    model = load_robot_config(BAXTER_LEFT).build_model()
    reference, _ = mujoco_rollout(model, REFERENCE_DT)
    reference = reference[-1]
    check, _ = rigid_rollout(model, REFERENCE_DT)
    SDIRKStep(model, 0.1).step(Q0, np.zeros(7), np.zeros(7))  # load the compiled kernels before timing
    rows = [["package implicit Euler (rigid step) at the reference dt", REFERENCE_DT, f"{np.abs(check[-1] - reference).max():.2e}", "", "", ""]]
    for dt in STEPS:
        for name, rollout in (("SDIRK2 (sim/large_step.py)", sdirk_rollout), ("package implicit Euler (rigid step)", rigid_rollout),
                              ("MuJoCo RK4", mujoco_rollout)):
            rows.append(_row(name, dt, model, rollout, reference))
            print(rows[-1], flush=True)
    body = "\n\n".join([
        "## Large time steps: SDIRK vs implicit Euler vs MuJoCo RK4 (`python -m benchmarks.bench_large_step`)",
        machine_line() + f"; load average {load:.2f} at the start" + load_note(load),
        __doc__.split("\n\n")[1].replace("\n", " "),
        markdown_table(["integrator", "dt [s]", "joint error at 5 s [rad]", "max speed [rad/s]", "max energy rise per step [J]",
                        "time per step [µs]"], rows),
        f"Run time {time.perf_counter() - start:.0f} s.",
    ])
    write_section("large-step", body)
    print(body)


if __name__ == "__main__":
    main()

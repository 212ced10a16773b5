"""One arm step plus its Jacobians in state and torque: compiled analytic derivatives vs Nimble (issue 17).

Both sides load the same 7-joint chain of Baxter's left arm (the URDF reduced to the links
between ``base`` and ``left_hand``, no geometry), rigid, no passive terms, dt = 0.01 s,
semi-implicit Euler. Nimble (nimblephysics, optional: ``pip install nimblephysics``) takes
``forwardPass`` and its analytic ``getStateJacobian`` and ``getActionJacobian``; ours is
:class:`~diffsim_ros.sim.rigid_fast.FastRigidStep` ``jacobians`` (exact Jacobians, checked to
1e-9 against autograd in test/test_derivatives.py). Before timing, both next states are
compared with a Pinocchio semi-implicit Euler step of the same URDF. Times per Python call,
medians; the machine's load average is recorded.

Run: ``.venv/bin/python -m benchmarks.bench_step_jacobians``.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from lxml import etree

from benchmarks.common import machine_line, markdown_table, median, time_call, write_section
from diffsim_ros.model import RobotModel, load_robot_config
from diffsim_ros.sim.rigid_fast import FastRigidStep
from oracles import BAXTER_LEFT, BAXTER_URDF

DT = 0.01  # [s]
REPEATS, INNER = 40, 50
VALUE_TOL = 1e-9  # next state vs Pinocchio [rad, rad/s]


def chain_urdf(source, base, tip, path):
    """Write the URDF of the joints between ``base`` and ``tip`` only (inertials kept, geometry dropped)."""
    root = etree.parse(str(source)).getroot()
    by_child = {j.find("child").get("link"): j for j in root.findall("joint")}
    keep_links, keep_joints, link = {tip}, set(), tip
    while link != base:
        joint = by_child[link]
        keep_joints.add(joint.get("name"))
        link = joint.find("parent").get("link")
        keep_links.add(link)
    for element in list(root):
        name = element.get("name")
        if (element.tag == "link" and name not in keep_links) or (element.tag == "joint" and name not in keep_joints) \
                or element.tag not in ("link", "joint"):
            root.remove(element)
    for element in root.iter("visual", "collision"):
        element.getparent().remove(element)
    Path(path).write_bytes(etree.tostring(root))
    return path


def pinocchio_step(path, model):
    import pinocchio as pin

    pm = pin.buildModelFromUrdf(str(path))
    pm.gravity.linear = np.array([0.0, 0.0, -9.81])
    data = pm.createData()
    order = [pm.getJointId(name) - 1 for name in model.joint_names]  # idx_v of each of our joints

    def step(q, qd, tau):
        pq, pv, pt = np.zeros(pm.nq), np.zeros(pm.nv), np.zeros(pm.nv)
        pq[order], pv[order], pt[order] = q, qd, tau
        qdd = pin.aba(pm, data, pq, pv, pt)[order]
        qd_next = qd + DT * qdd
        return q + DT * qd_next, qd_next

    return step


class NimbleArm:
    def __init__(self, nimble, path, model):
        self.nimble = nimble
        self.world = nimble.simulation.World()
        self.world.setGravity(np.array([0.0, 0.0, -9.81]))
        self.world.setTimeStep(DT)
        self.arm = self.world.loadSkeleton(str(path))
        dofs = [self.arm.getDof(i).getName() for i in range(self.arm.getNumDofs())]
        self.order = [dofs.index(name) for name in model.joint_names]
        for i in range(self.arm.getNumDofs()):  # nothing but the rigid dynamics
            self.arm.getDof(i).setPositionLimits(-1e9, 1e9)
            self.arm.getDof(i).setVelocityLimits(-1e9, 1e9)
            self.arm.getDof(i).setControlForceLimits(-1e9, 1e9)
            self.arm.getDof(i).setDampingCoefficient(0.0)
            self.arm.getDof(i).setCoulombFriction(0.0)
            self.arm.getDof(i).setSpringStiffness(0.0)

    def set(self, q, qd, tau):
        n = self.arm.getNumDofs()
        pq, pv, pt = np.zeros(n), np.zeros(n), np.zeros(n)
        pq[self.order], pv[self.order], pt[self.order] = q, qd, tau
        self.world.setPositions(pq)
        self.world.setVelocities(pv)
        self.world.setControlForces(pt)

    def step(self, q, qd, tau):
        self.set(q, qd, tau)
        self.world.step()
        return self.world.getPositions()[self.order], self.world.getVelocities()[self.order]

    def jacobians(self, q, qd, tau):
        self.set(q, qd, tau)
        snapshot = self.nimble.neural.forwardPass(self.world)
        return snapshot.getStateJacobian(self.world), snapshot.getActionJacobian(self.world)


def _nimble_times(path, q, qd, tau, expected):
    """Run in a child process (Nimble's extension can crash the interpreter): prints its figures."""
    import nimblephysics as nimble

    model = RobotModel.from_urdf(path, base_link="base", tip_link="left_hand")
    arm = NimbleArm(nimble, path, model)
    error = np.abs(np.concatenate(arm.step(q, qd, tau)) - expected).max()
    step = median(time_call(lambda: arm.step(q, qd, tau), REPEATS, inner=INNER))
    jac = median(time_call(lambda: arm.jacobians(q, qd, tau), REPEATS, inner=INNER))
    print(json.dumps([step, jac, float(error), getattr(nimble, "__version__", "")]))


def _nimble_in_subprocess(path, q, qd, tau, expected):
    """``(figures or None, note)``: Nimble's (step, jacobians, error, version) measured in a child process."""
    try:
        version = importlib.metadata.version("nimblephysics")
    except importlib.metadata.PackageNotFoundError:
        return None, "nimblephysics not installed: no peer figures."
    args = json.dumps([str(path), *(np.asarray(x).tolist() for x in (q, qd, tau, expected))])
    child = subprocess.run([sys.executable, "-m", "benchmarks.bench_step_jacobians", "--nimble", args],
                           capture_output=True, text=True, timeout=600)
    if child.returncode != 0:
        return None, (f"nimblephysics {version} is installed but its child process ended with code {child.returncode} "
                      f"({'segmentation fault' if child.returncode == -11 else child.stderr.strip()[-200:]}) "
                      f"with numpy {np.__version__}: no peer figures in this run.")
    return json.loads(child.stdout.strip().splitlines()[-1]), ""


def main():
    if sys.argv[1:2] == ["--nimble"]:
        path, *vectors = json.loads(sys.argv[2])
        return _nimble_times(path, *(np.array(v) for v in vectors))
    load = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    q, qd, tau = np.array([0.1, -0.3, 0.2, 0.8, -0.1, 0.6, 0.3]), rng.uniform(-1, 1, 7), rng.uniform(-5, 5, 7)
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = chain_urdf(BAXTER_URDF, "base", "left_hand", Path(tmp) / "baxter_left_chain.urdf")
        model = RobotModel.from_urdf(path, base_link="base", tip_link="left_hand")
        reference = pinocchio_step(path, model)
        expected = np.concatenate(reference(q, qd, tau))
        ours = FastRigidStep(model, DT, passive=False, parameters=())
        error = np.abs(np.concatenate(ours.step(q, qd, tau)) - expected).max()
        assert error < VALUE_TOL, f"our step differs from Pinocchio by {error:.3g}"
        step = median(time_call(lambda: ours.step(q, qd, tau), REPEATS, inner=INNER))
        jac = median(time_call(lambda: ours.jacobians(q, qd, tau), REPEATS, inner=INNER))
        rows.append(["diffsim_ros FastRigidStep (compiled, analytic)", f"{step * 1e6:.1f}", f"{jac * 1e6:.1f}", f"{error:.1e}"])
        shipped = FastRigidStep(load_robot_config(BAXTER_LEFT).build_model(), DT, parameters=())
        jac_passive = median(time_call(lambda: shipped.jacobians(q, qd, tau), REPEATS, inner=INNER))
        step_passive = median(time_call(lambda: shipped.step(q, qd, tau), REPEATS, inner=INNER))
        rows.append(["diffsim_ros, Baxter config (springs, damping, friction)", f"{step_passive * 1e6:.1f}",
                     f"{jac_passive * 1e6:.1f}", "(other model)"])
        nimble_jac, note = _nimble_in_subprocess(path, q, qd, tau, expected)
        if note:
            notes.append(note)
        else:
            n_step, nimble_jac, error, version = nimble_jac
            rows.append([f"Nimble {version} forwardPass + getStateJacobian + getActionJacobian",
                         f"{n_step * 1e6:.1f}", f"{nimble_jac * 1e6:.1f}", f"{error:.1e}"])
    ratio = nimble_jac / jac if nimble_jac else float("nan")
    body = "\n\n".join([
        "## Arm step and Jacobians: compiled analytic derivatives vs Nimble (`python -m benchmarks.bench_step_jacobians`)",
        machine_line() + f"; load average {load:.2f} at the start" + (" (measured under load)" if load > 0.5 else ""),
        __doc__.split("\n\n")[1].replace("\n", " "),
        markdown_table(["implementation", "step [µs]", "step + state/torque Jacobians [µs]", "|next state - Pinocchio|"], rows),
        f"Jacobian ratio (Nimble / ours; above 1: we are faster): {ratio:.2f}",
        *notes,
    ])
    write_section("step-jacobians", body)
    print(body)
    print(f"step jacobians ratio to nimble: {ratio:.2f}")


if __name__ == "__main__":
    main()

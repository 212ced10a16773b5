"""One arm step plus its Jacobians in state and torque: compiled analytic derivatives vs Nimble (issue 17).

Both sides load the same 7-joint chain of Baxter's left arm (the URDF reduced to the links
between ``base`` and ``left_hand``, no geometry), rigid, no passive terms, dt = 0.01 s,
semi-implicit Euler. Nimble (nimblephysics, optional: ``pip install nimblephysics``) takes
``forwardPass`` and its analytic ``getStateJacobian`` and ``getActionJacobian``; ours is
:class:`~diffsim_ros.sim.rigid_fast.FastRigidStep` ``jacobians`` (exact Jacobians, checked to
1e-9 against autograd in test/test_derivatives.py). Before timing, both next states are
compared with a Pinocchio semi-implicit Euler step of the same URDF (Nimble's positions with
``q + dt qd``: Nimble moves positions with the start velocity; its velocities are Pinocchio's). Times per Python call,
medians; the machine's load average is recorded.

Nimble runs in a child process under its own interpreter: nimblephysics 0.10.52 segfaults with
numpy >= 2 (the package's venv), so give it a venv with numpy < 2 by ``--peer-python PATH`` or
the ``DIFFSIM_NIMBLE_PYTHON`` environment variable (default: this interpreter); see
:mod:`benchmarks.nimble_peer`.

Run: ``.venv/bin/python -m benchmarks.bench_step_jacobians [--peer-python /work/peers/nimble/bin/python]``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from lxml import etree

from benchmarks.common import load_note, machine_line, markdown_table, median, time_call, write_section
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


def peer_python(argv=None):
    """The interpreter for the Nimble child: ``--peer-python PATH``, else ``$DIFFSIM_NIMBLE_PYTHON``, else this one."""
    argv = sys.argv[1:] if argv is None else argv
    if "--peer-python" in argv:
        return argv[argv.index("--peer-python") + 1]
    return os.environ.get("DIFFSIM_NIMBLE_PYTHON") or sys.executable


def run_nimble_peer(python, kind, arguments):
    """``(figures or None, note)``: :mod:`benchmarks.nimble_peer` ``kind`` run by ``python`` (a child process:
    Nimble's extension can crash the interpreter)."""
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('nimblephysics'))"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return None, f"nimblephysics not importable by {python}: no peer figures (see --peer-python)."
    version = probe.stdout.strip()
    root = Path(__file__).resolve().parents[1]
    child = subprocess.run([python, "-m", "benchmarks.nimble_peer", kind, json.dumps(arguments)], cwd=root,
                           capture_output=True, text=True, timeout=600)
    if child.returncode != 0:
        numpy = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"], capture_output=True, text=True)
        return None, (f"nimblephysics {version} ({python}) is installed but its child process ended with code "
                      f"{child.returncode} ({'segmentation fault' if child.returncode == -11 else child.stderr.strip()[-200:]}) "
                      f"with numpy {numpy.stdout.strip()}: no peer figures in this run.")
    return json.loads(child.stdout.strip().splitlines()[-1]), ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default=None, metavar="PATH", help="interpreter with nimblephysics (see peer_python)")
    parser.parse_args()  # peer_python() reads the same option
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
        figures, note = run_nimble_peer(peer_python(), "arm", [str(path), list(model.joint_names), DT,
                                                              *(np.asarray(x).tolist() for x in (q, qd, tau))])
        nimble_jac = None
        if note:
            notes.append(note)
        else:
            n_step, nimble_jac, next_state, version = figures
            # Nimble advances positions with the start velocity (q + dt qd, its time stepping),
            # velocities as semi-implicit Euler: both are checked against Pinocchio's qd_next.
            nimble_expected = np.concatenate([q + DT * qd, expected[7:]])
            error = np.abs(np.asarray(next_state) - nimble_expected).max()
            if error > VALUE_TOL:
                notes.append(f"Nimble's next state differs from Pinocchio's by {error:.2g} (> {VALUE_TOL:g}).")
            rows.append([f"Nimble {version} forwardPass + getStateJacobian + getActionJacobian",
                         f"{n_step * 1e6:.1f}", f"{nimble_jac * 1e6:.1f}", f"{error:.1e}"])
    ratio = nimble_jac / jac if nimble_jac else float("nan")
    body = "\n\n".join([
        "## Arm step and Jacobians: compiled analytic derivatives vs Nimble (`python -m benchmarks.bench_step_jacobians`)",
        machine_line() + f"; load average {load:.2f} at the start" + load_note(load),
        __doc__.split("\n\n")[1].replace("\n", " "),
        __doc__.split("\n\n")[2].replace("\n", " ") + f" This run: `{peer_python()}`.",
        markdown_table(["implementation", "step [µs]", "step + state/torque Jacobians [µs]", "|next state - Pinocchio|"], rows),
        f"Jacobian ratio (Nimble / ours; above 1: we are faster): {ratio:.2f}",
        *notes,
    ])
    write_section("step-jacobians", body)
    print(body)
    print(f"step jacobians ratio to nimble: {ratio:.2f}")


if __name__ == "__main__":
    main()

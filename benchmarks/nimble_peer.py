"""Nimble (nimblephysics) peer figures, run in a child interpreter of its own.

nimblephysics 0.10.52 segfaults with numpy >= 2, which the package's venv uses, so the
benchmarks run this module under a separate interpreter (``--peer-python`` or the
``DIFFSIM_NIMBLE_PYTHON`` environment variable, e.g. a venv made with
``python3 -m venv /work/peers/nimble && /work/peers/nimble/bin/pip install torch==2.13.0 'numpy<2' nimblephysics``).
It imports only numpy, nimblephysics and the timing helpers of :mod:`benchmarks.common`
(not the package), and prints one JSON line: the peer's times and next state, which the
calling benchmark checks against its own reference before using the times.

Usage (from the repository root): ``python -m benchmarks.nimble_peer arm|box '<json arguments>'``.
"""

import argparse
import importlib.metadata
import json

import numpy as np

from benchmarks.common import median, time_call

__all__ = ["NimbleArm", "NimbleBox", "arm_figures", "box_figures"]

REPEATS, INNER = 40, 50


def _version():
    return importlib.metadata.version("nimblephysics")


def _welded(path):
    """Copy of the URDF with its root link welded to ``world`` (DART's loader gives a bare root a free joint)."""
    import tempfile
    import xml.etree.ElementTree as ET

    tree = ET.parse(str(path))
    robot = tree.getroot()
    children = {j.find("child").get("link") for j in robot.findall("joint")}
    root = next(link.get("name") for link in robot.findall("link") if link.get("name") not in children)
    ET.SubElement(robot, "link", name="world")
    joint = ET.SubElement(robot, "joint", name="world_weld", type="fixed")
    ET.SubElement(joint, "parent", link="world")
    ET.SubElement(joint, "child", link=root)
    out = tempfile.NamedTemporaryFile(suffix=".urdf", delete=False)
    tree.write(out.name)
    return out.name


class NimbleArm:
    """An arm loaded from a URDF, rigid (limits, damping, friction and springs off), dof order of ``joint_names``."""

    def __init__(self, nimble, path, joint_names, dt):
        self.nimble = nimble
        self.world = nimble.simulation.World()
        self.world.setGravity(np.array([0.0, 0.0, -9.81]))
        self.world.setTimeStep(dt)
        self.arm = self.world.loadSkeleton(str(_welded(path)))
        dofs = list(self.arm.getDofs())  # getDof takes names only in 0.10.52
        self.order = [[d.getName() for d in dofs].index(name) for name in joint_names]
        for dof in dofs:  # nothing but the rigid dynamics
            dof.setPositionLimits(-1e9, 1e9)
            dof.setVelocityLimits(-1e9, 1e9)
            dof.setControlForceLimits(-1e9, 1e9)
            dof.setDampingCoefficient(0.0)
            dof.setCoulombFriction(0.0)
            dof.setSpringStiffness(0.0)

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


class NimbleBox:
    """A free box (edge ``size`` [m], ``mass`` [kg], friction ``mu``) on a static floor box whose top is z = 0."""

    def __init__(self, nimble, size, mass, mu, dt):
        self.nimble = nimble
        self.world = nimble.simulation.World()
        self.world.setGravity(np.array([0.0, 0.0, -9.81]))
        self.world.setTimeStep(dt)
        box = nimble.dynamics.Skeleton()
        _, body = box.createFreeJointAndBodyNodePair()
        shape = body.createShapeNode(nimble.dynamics.BoxShape(np.full(3, size)))
        shape.createCollisionAspect()
        body.setMass(mass)
        body.setMomentOfInertia(*(mass * size * size / 6.0,) * 3, 0.0, 0.0, 0.0)
        body.setFrictionCoeff(mu)
        body.setRestitutionCoeff(0.0)
        self.world.addSkeleton(box)
        floor = nimble.dynamics.Skeleton()
        joint, floor_body = floor.createWeldJointAndBodyNodePair()
        offset = nimble.math.Isometry3()
        offset.set_translation(np.array([0.0, 0.0, -0.5]))
        joint.setTransformFromParentBodyNode(offset)
        floor_shape = floor_body.createShapeNode(nimble.dynamics.BoxShape(np.array([10.0, 10.0, 1.0])))
        floor_shape.createCollisionAspect()
        floor_body.setFrictionCoeff(mu)
        self.world.addSkeleton(floor)

    def set(self, state):
        """``state``: free-joint positions (rotation vector, translation) then velocities, (12,)."""
        self.world.setState(np.asarray(state, dtype=float))
        self.world.setControlForces(np.zeros(6))

    def step(self, state):
        self.set(state)
        self.world.step()
        return self.world.getState()

    def jacobians(self, state):
        self.set(state)
        snapshot = self.nimble.neural.forwardPass(self.world)
        return snapshot.getStateJacobian(self.world), snapshot.getActionJacobian(self.world)


def arm_figures(path, joint_names, dt, q, qd, tau):
    """``[step s, step + Jacobians s, next state (q, qd), version]`` of the arm."""
    import nimblephysics as nimble

    arm = NimbleArm(nimble, path, joint_names, dt)
    q, qd, tau = (np.asarray(v, dtype=float) for v in (q, qd, tau))
    next_state = np.concatenate(arm.step(q, qd, tau))
    step = median(time_call(lambda: arm.step(q, qd, tau), REPEATS, inner=INNER))
    jac = median(time_call(lambda: arm.jacobians(q, qd, tau), REPEATS, inner=INNER))
    return [step, jac, next_state.tolist(), _version()]


def box_figures(size, mass, mu, dt, state, settle_steps):
    """Box sliding on the floor: ``[step s, step + Jacobians s, contacts, state, next state, version]``.

    ``state`` (12,) is stepped ``settle_steps`` times first (contacts established), then timed.
    """
    import nimblephysics as nimble

    box = NimbleBox(nimble, size, mass, mu, dt)
    state = np.asarray(state, dtype=float)
    for _ in range(settle_steps):
        state = box.step(state)
    next_state = box.step(state)
    contacts = box.world.getLastCollisionResult().getNumContacts()
    step = median(time_call(lambda: box.step(state), REPEATS, inner=INNER))
    jac = median(time_call(lambda: box.jacobians(state), REPEATS, inner=INNER))
    return [step, jac, int(contacts), state.tolist(), next_state.tolist(), _version()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("arm", "box"))
    parser.add_argument("arguments", help="JSON list of the figures function's arguments")
    args = parser.parse_args()
    kind, arguments = args.kind, json.loads(args.arguments)
    figures = {"arm": arm_figures, "box": box_figures}[kind](*arguments)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

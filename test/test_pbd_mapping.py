"""Joint space <-> PBD particle state (paper Algorithm 2 made exact over the full range)."""

import math

import numpy as np
import pytest
import torch

from diffsim_ros.dynamics import body_placements, frame_jacobian
from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.model import RobotModel
from diffsim_ros.sim import PBDSimulator, joints_from_state, state_from_joints
from diffsim_ros.sim.pbd import build_system, constraint_residuals, joint_positions
from oracles import EXAMPLE_ARMS, example_robot_urdf
from test_pbd_references import baxter, random_state

ROUND_TRIP_TOL = 1e-12  # [rad, rad/s, m]
RESIDUAL_TOL = 1e-12  # constraint violation of a mapped state [m, rad]


def _arm(name):
    rel, base, tip = EXAMPLE_ARMS[name]
    return RobotModel.from_urdf(example_robot_urdf(rel), base_link=base, tip_link=tip)


@pytest.mark.parametrize("name", ["baxter", "panda_finger", "ur5"])
def test_round_trip_batched(name):
    model = baxter() if name == "baxter" else _arm(name)
    states = [random_state(model, seed, speed=2.0) for seed in range(4)]
    q = torch.stack([s[0] for s in states])
    qd = torch.stack([s[1] for s in states])
    state = state_from_joints(model, q, qd)
    assert state.pos.shape == (4, model.nq + 1, 3) and state.quat.shape == (4, model.nq + 1, 4)
    # Joints with more than 2 pi of range (UR5: +-2 pi) need a reference branch.
    q_back, qd_back = joints_from_state(model, state, q_ref=q + 0.3)
    np.testing.assert_allclose(q_back, q, atol=ROUND_TRIP_TOL, rtol=0)
    if bool((model.upper - model.lower <= 2 * math.pi).all()):
        np.testing.assert_allclose(joints_from_state(model, state)[0], q, atol=ROUND_TRIP_TOL, rtol=0)
    np.testing.assert_allclose(qd_back, qd, atol=ROUND_TRIP_TOL, rtol=0)
    pos_err, ang_err = constraint_residuals(build_system(model), state.pos, state.quat)
    assert float(pos_err.max()) < RESIDUAL_TOL and float(ang_err.max()) < RESIDUAL_TOL


def test_particle_velocities_are_the_rigid_body_velocities():
    """COM velocity = Jacobian velocity of the body origin + w x (R c); w from the Jacobian."""
    model = baxter()
    q, qd = random_state(model, 1, speed=2.0)
    state = state_from_joints(model, q, qd)
    rot, _ = body_placements(model, q)
    com = build_system(model).bodies.com[1:]
    for body, link in enumerate(model.body_names):
        jac = frame_jacobian(model, q, link)
        origin_vel, omega = jac[:3] @ qd, jac[3:] @ qd
        expected = origin_vel + torch.cross(omega, matvec(rot[body], com[body]), dim=-1)
        np.testing.assert_allclose(state.omega[body + 1], omega, atol=ROUND_TRIP_TOL, rtol=0)
        np.testing.assert_allclose(state.vel[body + 1], expected, atol=ROUND_TRIP_TOL, rtol=0)


def test_signed_angles_over_the_full_range():
    """atan2 twist angles: no folding at +-pi/2 (arcsin would), exact up to the limits."""
    model = baxter()
    elbow = model.joint_index("left_e0")  # limits +-3.05 rad
    for angle in (-3.05, -2.5, -math.pi / 2 - 0.3, 0.0, math.pi / 2 + 0.3, 2.9, 3.05):
        q = torch.zeros(model.nq, dtype=model.dtype)
        q[elbow] = angle
        recovered = joint_positions(model, state_from_joints(model, q, torch.zeros_like(q)))
        assert abs(float(recovered[elbow]) - angle) < ROUND_TRIP_TOL


def test_continuous_joint_is_unwrapped_near_the_reference():
    model = _arm("kinova_continuous")
    joint = model.continuous.index(True)
    q = torch.zeros(model.nq, dtype=model.dtype)
    q[joint] = 4.0  # beyond pi
    state = state_from_joints(model, q, torch.zeros_like(q))
    wrapped = joint_positions(model, state)
    assert abs(float(wrapped[joint]) - (4.0 - 2 * math.pi)) < ROUND_TRIP_TOL
    near = joint_positions(model, state, q_ref=q + 0.2)
    assert abs(float(near[joint]) - 4.0) < ROUND_TRIP_TOL


def test_simulator_exposes_the_mapping_and_keeps_continuous_angles_continuous():
    model = _arm("kinova_continuous")
    joint = model.continuous.index(True)
    sim = PBDSimulator(model, dt=0.01, substeps=2, limits=False)
    q = torch.zeros(model.nq, dtype=model.dtype)
    q[joint] = math.pi - 0.01
    qd = torch.zeros_like(q)
    qd[joint] = 3.0  # crosses +pi within a step
    q1, _ = sim.joint_step(q, qd, torch.zeros_like(q))
    assert float(q1[joint]) > math.pi  # unwrapped, not jumped to -pi
    state = sim.initial_state(q, qd)
    q_back, qd_back = sim.joint_state(state, q_ref=q)
    np.testing.assert_allclose(q_back, q, atol=ROUND_TRIP_TOL, rtol=0)
    np.testing.assert_allclose(qd_back, qd, atol=ROUND_TRIP_TOL, rtol=0)

"""Every dynamics function against Pinocchio (several arms) and MuJoCo's mj_inverse (Baxter)."""

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.model import RobotModel, load_robot_config
from oracles import BAXTER_LEFT, BAXTER_RIGHT, BAXTER_URDF, EXAMPLE_ARMS, PinocchioOracle, example_robot_urdf, mujoco_model

PIN_TOL = 1e-9
MUJOCO_TOL = 1e-8
N_STATES = 5


def _robots():
    yield "baxter_left", BAXTER_URDF, "base", "left_hand"
    yield "baxter_right", BAXTER_URDF, "base", "right_hand"
    yield "baxter_full_tree", BAXTER_URDF, None, None
    for name, (rel, base, tip) in EXAMPLE_ARMS.items():
        yield name, example_robot_urdf(rel), base, tip


ROBOTS = {name: (path, base, tip) for name, path, base, tip in _robots()}


@pytest.fixture(scope="module", params=sorted(ROBOTS))
def setup(request):
    path, base, tip = ROBOTS[request.param]
    model = RobotModel.from_urdf(path, base_link=base, tip_link=tip)
    return model, PinocchioOracle(model, path)


def _states(model, seed):
    rng = np.random.default_rng(seed)
    lower = np.where(np.isfinite(model.lower.numpy()), model.lower.numpy(), -np.pi)
    upper = np.where(np.isfinite(model.upper.numpy()), model.upper.numpy(), np.pi)
    for _ in range(N_STATES):
        yield rng.uniform(lower, upper), rng.uniform(-2, 2, model.nq), rng.uniform(-5, 5, model.nq)


def _t(x):
    return torch.as_tensor(x, dtype=torch.float64)


def test_inverse_dynamics_terms(setup):
    model, oracle = setup
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    for q, qd, qdd in _states(model, 0):
        pq, pv, pa = oracle.q(q), oracle.v(qd), oracle.v(qdd)
        np.testing.assert_allclose(dyn.rnea(model, _t(q), _t(qd), _t(qdd)), oracle.sel(pin.rnea(pm, pd, pq, pv, pa)), atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(dyn.gravity_torques(model, _t(q)), oracle.sel(pin.computeGeneralizedGravity(pm, pd, pq)), atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(dyn.nonlinear_effects(model, _t(q), _t(qd)), oracle.sel(pin.nonLinearEffects(pm, pd, pq, pv)), atol=PIN_TOL, rtol=0)
        coriolis = pin.computeCoriolisMatrix(pm, pd, pq, pv) @ pv
        np.testing.assert_allclose(dyn.coriolis_torques(model, _t(q), _t(qd)), oracle.sel(coriolis), atol=PIN_TOL, rtol=0)


def test_mass_matrix_and_forward_dynamics(setup):
    model, oracle = setup
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    for q, qd, tau in _states(model, 1):
        pq, pv = oracle.q(q), oracle.v(qd)
        m_pin = pin.crba(pm, pd, pq)
        m_pin = np.triu(m_pin) + np.triu(m_pin, 1).T
        np.testing.assert_allclose(dyn.mass_matrix(model, _t(q)), oracle.sel2(m_pin), atol=PIN_TOL, rtol=0)
        if pm.nv == model.nq:  # forward dynamics is only comparable when no extra dof exists
            expected = pin.aba(pm, pd, pq, pv, oracle.v(tau))
            np.testing.assert_allclose(dyn.aba(model, _t(q), _t(qd), _t(tau)), oracle.sel(expected), atol=PIN_TOL, rtol=0)
            np.testing.assert_allclose(dyn.forward_dynamics(model, _t(q), _t(qd), _t(tau)), oracle.sel(expected), atol=PIN_TOL, rtol=0)
            # Rotor inertia: Pinocchio's ABA adds model.armature to the joint-space inertia.
            armature = np.linspace(0.05, 0.4, pm.nv)
            saved, pm.armature = pm.armature.copy(), armature
            try:
                expected = pin.aba(pm, pd, pq, pv, oracle.v(tau))
            finally:
                pm.armature = saved
            ours = dyn.aba(model, _t(q), _t(qd), _t(tau), armature=_t(oracle.sel(armature)))
            np.testing.assert_allclose(ours, oracle.sel(expected), atol=PIN_TOL, rtol=0)


def test_kinematics_and_energy(setup):
    model, oracle = setup
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    for q, qd, _ in _states(model, 2):
        pq, pv = oracle.q(q), oracle.v(qd)
        pin.forwardKinematics(pm, pd, pq)
        pin.updateFramePlacements(pm, pd)
        pin.computeJointJacobians(pm, pd, pq)
        for link in model.body_names[-2:] + ((model.tip_link,) if model.tip_link else ()):
            fid = oracle.frame_id(link)
            np.testing.assert_allclose(dyn.forward_kinematics(model, _t(q), link), pd.oMf[fid].homogeneous, atol=PIN_TOL, rtol=0)
            jac = pin.getFrameJacobian(pm, pd, fid, pin.LOCAL_WORLD_ALIGNED)[:, oracle.v_index]
            np.testing.assert_allclose(dyn.frame_jacobian(model, _t(q), link), jac, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(dyn.kinetic_energy(model, _t(q), _t(qd)), pin.computeKineticEnergy(pm, pd, pq, pv), atol=PIN_TOL, rtol=0)
        # Pinocchio's potential includes bodies fixed to the base; compare differences between states.
        q2 = q + 0.1
        pot = dyn.potential_energy(model, _t(q2)) - dyn.potential_energy(model, _t(q))
        pin_pot = pin.computePotentialEnergy(pm, pd, oracle.q(q2)) - pin.computePotentialEnergy(pm, pd, pq)
        np.testing.assert_allclose(pot, pin_pot, atol=PIN_TOL, rtol=0)


def test_payload_matches_pinocchio_with_appended_mass():
    """A payload equals a point mass rigidly added to the payload frame's body."""
    import pinocchio as pin

    model = load_robot_config(BAXTER_LEFT).build_model().with_payload(1.3, (0.02, -0.01, 0.05))
    oracle = PinocchioOracle(model, BAXTER_URDF)
    frame = oracle.model.frames[oracle.frame_id("left_hand")]
    point = pin.Inertia(1.3, np.array([0.02, -0.01, 0.05]), np.zeros((3, 3)))
    oracle.model.inertias[frame.parentJoint] += frame.placement.act(point)
    data = oracle.model.createData()
    for q, qd, qdd in _states(model, 3):
        expected = pin.rnea(oracle.model, data, oracle.q(q), oracle.v(qd), oracle.v(qdd))
        np.testing.assert_allclose(dyn.rnea(model, _t(q), _t(qd), _t(qdd)), oracle.sel(expected), atol=PIN_TOL, rtol=0)


@pytest.mark.parametrize("config", [BAXTER_LEFT, BAXTER_RIGHT], ids=["left", "right"])
def test_rnea_matches_mujoco_inverse(config):
    import mujoco

    model = load_robot_config(config).build_model()
    mj = mujoco_model(BAXTER_URDF)
    data = mujoco.MjData(mj)
    dofs = np.array([mj.jnt_dofadr[mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, n)] for n in model.joint_names])
    for q, qd, qdd in _states(model, 4):
        data.qpos[:] = 0.0
        data.qvel[:] = 0.0
        data.qacc[:] = 0.0
        data.qpos[dofs], data.qvel[dofs], data.qacc[dofs] = q, qd, qdd
        mujoco.mj_inverse(mj, data)
        np.testing.assert_allclose(dyn.rnea(model, _t(q), _t(qd), _t(qdd)), data.qfrc_inverse[dofs], atol=MUJOCO_TOL, rtol=0)


def test_fast_single_configuration_path_matches_pinocchio(setup):
    from diffsim_ros.dynamics.fast import FastDynamics

    model, oracle = setup
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    fast = FastDynamics.from_model(model)
    for q, qd, qdd in _states(model, 5):
        pq, pv, pa = oracle.q(q), oracle.v(qd), oracle.v(qdd)
        np.testing.assert_allclose(fast.gravity_torques(q), oracle.sel(pin.computeGeneralizedGravity(pm, pd, pq)), atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(fast.rnea(q, qd, qdd), oracle.sel(pin.rnea(pm, pd, pq, pv, pa)), atol=PIN_TOL, rtol=0)

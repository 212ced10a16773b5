"""Joint armature (reflected rotor inertia): one parameter, in every algorithm that models it.

Held to Pinocchio (``model.armature``) and MuJoCo (``dof_armature``) to 1e-9 in the torch and the
compiled dynamics, and in the compiled rigid step against the torch step; its derivatives by
central differences; read from and written to the URDF as Drake's transmission extension; the
simulators that do not model it refuse a model that has it.
"""

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.dynamics.derivatives import aba_derivatives
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.io.urdf_export import export_calibrated_urdf
from diffsim_ros.model import RobotModel
from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.sim import make_simulator
from diffsim_ros.sim.pbd.errors import PBDError
from diffsim_ros.sim.rigid_fast import FastRigidStep
from oracles import EXAMPLE_ARMS, PinocchioOracle, example_robot_urdf, mujoco_model

PIN_TOL = 1e-9  # [N·m], [kg·m²], [rad/s²]: the same algorithms, float64 rounding only
MUJOCO_TOL = 1e-9  # MuJoCo's mass matrix from the same URDF inertials (measured 3e-15)
STEP_TOL = 1e-9  # compiled step against the torch step, one 10 ms step
FD_TOL = 1e-6  # relative error of a derivative against central differences
ARMATURE = np.array([0.31, 0.27, 0.19, 0.15, 0.08, 0.05, 0.02])  # [kg·m²] a geared 7-joint arm's order of size


@pytest.fixture(scope="module")
def panda():
    path = example_robot_urdf(EXAMPLE_ARMS["panda_finger"][0])
    model = RobotModel.from_urdf(path, tip_link="panda_link8")
    armature = torch.as_tensor(ARMATURE[: model.nq], dtype=model.dtype)
    with_armature = model.with_parameters({f"{j}.armature": a for j, a in zip(model.joint_names, armature)})
    return path, model, with_armature


def _state(model, seed):
    rng = np.random.default_rng(seed)
    lower, upper = model.lower.numpy(), model.upper.numpy()
    return rng.uniform(lower, upper), rng.uniform(-2, 2, model.nq), rng.uniform(-5, 5, model.nq)


def _t(x):
    return torch.as_tensor(x, dtype=torch.float64)


def test_torch_and_compiled_dynamics_match_pinocchio_with_armature(panda):
    path, _, model = panda
    oracle = PinocchioOracle(model, path)
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    pm.armature = oracle.v(model.params.armature.numpy())
    fast = FastDynamics.from_model(model)
    for seed in range(3):
        q, qd, x = _state(model, seed)
        pq, pv, px = oracle.q(q), oracle.v(qd), oracle.v(x)
        tau = oracle.sel(pin.rnea(pm, pd, pq, pv, px))
        mass = pin.crba(pm, pd, pq)
        mass = oracle.sel2(np.triu(mass) + np.triu(mass, 1).T)
        qdd = oracle.sel(pin.aba(pm, pd, pq, pv, px))
        np.testing.assert_allclose(dyn.rnea(model, _t(q), _t(qd), _t(x)), tau, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(dyn.mass_matrix(model, _t(q)), mass, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(dyn.aba(model, _t(q), _t(qd), _t(x)), qdd, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(fast.rnea(q, qd, x), tau, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(fast.mass_matrix(q), mass, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(fast.mass_matrix_diagonal(q), np.diag(mass), atol=PIN_TOL, rtol=0)
        pin.computeABADerivatives(pm, pd, pq, pv, px)
        ours = aba_derivatives(fast, q, qd, x)
        np.testing.assert_allclose(ours[0], qdd, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(ours[1], oracle.sel2(pd.ddq_dq), atol=1e-7, rtol=0)
        np.testing.assert_allclose(ours[3], oracle.sel2(np.triu(pd.Minv) + np.triu(pd.Minv, 1).T), atol=PIN_TOL, rtol=0)


def test_forward_dynamics_match_mujoco_dof_armature(panda):
    import mujoco

    path, _, model = panda
    mj = mujoco_model(path)
    names = [mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_JOINT, i) for i in range(mj.njnt)]
    dofs = np.array([mj.jnt_dofadr[names.index(j)] for j in model.joint_names])
    mj.dof_armature[dofs] = model.params.armature.numpy()
    data = mujoco.MjData(mj)
    for seed in range(3):
        q, qd, tau = _state(model, seed)
        data.qpos[:], data.qvel[:], data.qfrc_applied[:] = 0.0, 0.0, 0.0
        data.qpos[mj.jnt_qposadr[[names.index(j) for j in model.joint_names]]] = q
        data.qvel[dofs] = qd
        data.qfrc_applied[dofs] = tau
        mujoco.mj_forward(mj, data)
        if mj.nv == model.nq:
            np.testing.assert_allclose(dyn.aba(model, _t(q), _t(qd), _t(tau)), data.qacc[dofs], atol=MUJOCO_TOL, rtol=0)
        full = np.zeros((mj.nv, mj.nv))
        mujoco.mj_fullM(mj, data, full)
        np.testing.assert_allclose(dyn.mass_matrix(model, _t(q)), full[np.ix_(dofs, dofs)], atol=MUJOCO_TOL, rtol=0)


def test_the_mujoco_plant_has_the_truths_armature(panda):
    """The testbed plant's mass matrix is the model's with the same armature (it was zeroed before issue 46)."""
    import mujoco

    from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth

    path, nominal, model = panda
    plant = MujocoPlant(nominal, path, PlantTruth(armature=tuple(model.params.armature.numpy())))
    for seed in range(2):
        q = _state(model, seed)[0]
        plant.reset(q)
        full = np.zeros((plant.mj_model.nv, plant.mj_model.nv))
        mujoco.mj_fullM(plant.mj_model, plant.data, full)
        dofs = [plant.mj_model.jnt_dofadr[mujoco.mj_name2id(plant.mj_model, mujoco.mjtObj.mjOBJ_JOINT, j)] for j in model.joint_names]
        np.testing.assert_allclose(dyn.mass_matrix(model, _t(q)), full[np.ix_(dofs, dofs)], atol=MUJOCO_TOL, rtol=0)


def test_compiled_rigid_step_matches_the_torch_step_with_armature(panda):
    _, _, model = panda
    model = model.with_parameters({f"{j}.damping": 0.5 for j in model.joint_names})
    torch_step = make_simulator(model, 0.01, "rigid")
    fast = FastRigidStep(model, 0.01)
    for seed in range(2):
        q, qd, tau = _state(model, seed)
        q_t, qd_t = torch_step.joint_step(_t(q), _t(qd), _t(tau))
        q_f, qd_f = fast.step(q, qd, tau)
        np.testing.assert_allclose(q_f, q_t.numpy(), atol=STEP_TOL, rtol=0)
        np.testing.assert_allclose(qd_f, qd_t.numpy(), atol=STEP_TOL, rtol=0)
        jac = fast.jacobians(q, qd, tau)
        step = 1e-6
        for k in range(model.nq):  # the torque Jacobian (where the armature acts) by central differences
            e = np.zeros(model.nq)
            e[k] = step
            plus, minus = fast.step(q, qd, tau + e), fast.step(q, qd, tau - e)
            column = (np.concatenate(plus) - np.concatenate(minus)) / (2 * step)
            np.testing.assert_allclose(jac.d_torque[:, k], column, atol=FD_TOL * np.abs(column).max(), rtol=0)


def test_inverse_dynamics_derivative_in_armature_by_central_differences(panda):
    _, _, model = panda
    q, qd, qdd = (_t(x) for x in _state(model, 4))

    def torques(armature):
        return dyn.rnea(model.with_parameters({f"{j}.armature": a for j, a in zip(model.joint_names, armature)}), q, qd, qdd)

    base = model.params.armature.clone()
    jac = torch.autograd.functional.jacobian(torques, base)
    np.testing.assert_allclose(jac.numpy(), torch.diag(qdd).numpy(), atol=1e-12, rtol=0)  # d tau / d a = diag(qdd)
    step = 1e-6
    for k in range(model.nq):
        e = torch.zeros_like(base)
        e[k] = step
        column = (torques(base + e) - torques(base - e)) / (2 * step)
        np.testing.assert_allclose(column.numpy(), jac[:, k].numpy(), atol=1e-7, rtol=0)


def test_urdf_round_trip_as_drake_transmission(panda, tmp_path):
    path, nominal, model = panda
    out = tmp_path / "calibrated.urdf"
    export_calibrated_urdf(model, nominal, path, out)
    text = out.read_text()
    assert "drake:rotor_inertia" in text and 'xmlns:drake="http://drake.mit.edu"' in text
    again = RobotModel.from_urdf(out, tip_link="panda_link8")
    np.testing.assert_allclose(again.params.armature.numpy(), model.params.armature.numpy(), rtol=0, atol=1e-15)
    # a gear ratio reflects the rotor's inertia by its square, as Drake does
    geared = text.replace('<drake:gear_ratio value="1.0"/>', '<drake:gear_ratio value="2.0"/>', 1)
    first = RobotModel.from_urdf(geared, tip_link="panda_link8").params.armature.numpy()
    assert first[0] == pytest.approx(4.0 * ARMATURE[0], rel=1e-12)
    with pytest.raises(RobotModelError, match="rotor_inertia value must be a finite number"):
        RobotModel.from_urdf(text.replace(f'value="{float(ARMATURE[0])!r}"', 'value="nan"', 1), tip_link="panda_link8")


def test_simulators_without_armature_refuse_a_model_that_has_it(panda):
    _, nominal, model = panda
    make_simulator(nominal, 0.01, "pbd")  # no armature: fine
    with pytest.raises(PBDError, match="does not model joint armature"):
        make_simulator(model, 0.01, "pbd")

"""Joint armature (reflected rotor inertia): one parameter, in every algorithm that models it.

Held to Pinocchio (``model.armature``) and MuJoCo (``dof_armature``) to 1e-9 in the torch and the
compiled dynamics, and in the compiled rigid step against the torch step; its derivatives by
central differences; in the PBD step (torch and compiled) against MuJoCo, second order, with its
parameter derivative; read from and written to the URDF as Drake's transmission extension.
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
from diffsim_ros.sim import PBDSimulator
from diffsim_ros.sim.pbd.fast import FastPBD
from diffsim_ros.sim.rigid import RigidBodySimulator
from diffsim_ros.sim.rigid_fast import FastRigidStep
from oracles import EXAMPLE_ARMS, PinocchioOracle, example_robot_urdf, mujoco_model
from test_pbd_references import mujoco_rollout

PIN_TOL = 1e-9  # [N·m], [kg·m²], [rad/s²]: the same algorithms, float64 rounding only
MUJOCO_TOL = 1e-9  # MuJoCo's mass matrix from the same URDF inertials (measured 3e-15)
STEP_TOL = 1e-9  # compiled step against the torch step, one 10 ms step
FD_TOL = 1e-6  # relative error of a derivative against central differences
PBD_MUJOCO_TOL = 1e-4  # [rad] PBD (10 substeps of 1 ms) vs MuJoCo RK4 over 0.3 s: the scheme's second-order error
PBD_MUJOCO_QD_TOL = 5e-3  # [rad/s] the same for the joint rates (as test_pbd_fidelity's Baxter case)
SECOND_ORDER_RATIO = 3.0  # error(h) / error(h/2) of a second-order scheme is ~4
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


def _pbd_case(model, seed=1, steps=30):
    rng = np.random.default_rng(seed)
    model = model.with_parameters({f"{j}.damping": 0.5 for j in model.joint_names})
    q0, qd0 = rng.uniform(-1, 1, model.nq), rng.uniform(-1, 1, model.nq)
    return model, q0, qd0, rng.uniform(-3, 3, (steps, model.nq))


@pytest.mark.parametrize("fast", [False, True], ids=["torch", "compiled"])
def test_pbd_with_armature_matches_mujoco_dof_armature(panda, fast):
    """The PBD step carries the armature on the joints' free rows: it matches MuJoCo's M + diag(a)."""
    path, _, with_armature = panda
    model, q0, qd0, tau = _pbd_case(with_armature)
    ref_q, ref_qd = mujoco_rollout(model, q0, qd0, tau, 0.01, urdf=path, timestep=1e-4)
    simulator = PBDSimulator(model, dt=0.01, substeps=10, limits=False, fast=fast)
    assert (simulator.fast_rollout_supported() is None) == fast
    with torch.no_grad():
        q, qd = simulator.rollout(_t(q0), _t(qd0), _t(tau))
        q_none, _ = simulator.__class__(model.with_parameters({f"{j}.armature": 0.0 for j in model.joint_names}),
                                        dt=0.01, substeps=10, limits=False, fast=fast).rollout(_t(q0), _t(qd0), _t(tau))
    assert np.abs(q.numpy() - ref_q).max() < PBD_MUJOCO_TOL
    assert np.abs(qd.numpy() - ref_qd).max() < PBD_MUJOCO_QD_TOL
    assert np.abs(q_none.numpy() - ref_q).max() > 100 * PBD_MUJOCO_TOL  # the armature matters here


def test_pbd_with_armature_is_second_order(panda):
    _, _, with_armature = panda
    model, q0, qd0, tau = _pbd_case(with_armature, steps=20)
    with torch.no_grad():
        ref, _ = RigidBodySimulator(model, 0.01, substeps=50, integrator="rk4").rollout(_t(q0), _t(qd0), _t(tau))
        errors = [float((PBDSimulator(model, dt=0.01, substeps=s, limits=False).rollout(_t(q0), _t(qd0), _t(tau))[0] - ref).abs().max())
                  for s in (5, 10)]
    assert errors[0] / errors[1] > SECOND_ORDER_RATIO


def test_pbd_step_derivative_in_armature_by_central_differences(panda):
    """d(q+, qd+)/d armature: autograd through the torch PBD step vs central differences of the compiled step."""
    _, _, with_armature = panda
    model, q0, qd0, tau = _pbd_case(with_armature)
    names = [f"{j}.armature" for j in model.joint_names]
    settings = PBDSimulator(model, dt=0.01, substeps=4, limits=False).settings  # q0 is outside the Panda's limits

    def torch_step(armature):
        sim = PBDSimulator(model.with_parameters(dict(zip(names, armature))), dt=0.01, substeps=4, limits=False, fast=False)
        return torch.cat(sim.joint_step(_t(q0), _t(qd0), _t(tau[0])))

    def compiled_step(armature):
        pbd = FastPBD.from_model(model.with_parameters(dict(zip(names, _t(armature)))))
        q, qd, _ = pbd.rollout(q0[None], qd0[None], tau[None, :1], 0.01, settings)
        return np.concatenate([q[0, 0], qd[0, 0]])

    base = model.params.armature.clone()
    jac = torch.autograd.functional.jacobian(torch_step, base).numpy()
    np.testing.assert_allclose(torch_step(base).detach().numpy(), compiled_step(base.numpy()), atol=STEP_TOL, rtol=0)
    step = 1e-6
    for k in range(model.nq):
        e = np.zeros(model.nq)
        e[k] = step
        column = (compiled_step(base.numpy() + e) - compiled_step(base.numpy() - e)) / (2 * step)
        np.testing.assert_allclose(jac[:, k], column, atol=FD_TOL * np.abs(jac).max(), rtol=0)
    assert np.abs(jac).max() > 1e-3  # the step does depend on the armature

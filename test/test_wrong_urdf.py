"""The pieces of the wrong-URDF benchmark (benchmarks/bench_wrong_urdf.py, issue 46) checked on their own.

``test/wrong_urdf.py`` (the "real" arm: perturbed inertials, armature, damping, friction;
its ros2_control recording) and the base-parameter baseline of ``test/regression_baseline.py``
(its regressor columns against Pinocchio's rnea and MuJoCo's inverse dynamics; its base
parameters against the full set).
"""

from types import SimpleNamespace

import numpy as np
import pytest

from oracles import PinocchioOracle
from regression_baseline import base_columns, identification_regressor, passive_parameters, rigid_prediction
from wrong_urdf import (ARMS, COMMANDS, JOINT_RATE, JOINT_STATES, Excitation, link_inertials, make_real_arm, mujoco_arm,
                        perturb_inertials, record, write_ros2_control_bag)

INVERSE_DYNAMICS_TOL = 1e-9  # [N·m] regressor x parameters against rnea / mj_inverse (float64 round-off)
BASE_PREDICTION_TOL = 1e-8  # [N·m] torques of the base parameters fitted on exact torques, on other states
CONSISTENCY_TOL = 1e-12  # relative, inertia scaling and triangle inequalities
ARM_NAMES = sorted(ARMS)


def _states(oracle, rng, samples):
    n = len(oracle.joints)
    lower = oracle.model.lowerPositionLimit[[j.idx_q for j in oracle.joints]]
    upper = oracle.model.upperPositionLimit[[j.idx_q for j in oracle.joints]]
    return (rng.uniform(np.maximum(lower, -np.pi), np.minimum(upper, np.pi), (samples, n)),
            rng.standard_normal((samples, n)), rng.standard_normal((samples, n)))


@pytest.mark.parametrize("name", ARM_NAMES)
def test_the_perturbation_moves_every_link_and_keeps_it_physically_consistent(name):
    nominal_text = ARMS[name].urdf_path.read_text()
    text, changes = perturb_inertials(nominal_text, np.random.default_rng(3))
    nominal, real = link_inertials(nominal_text), link_inertials(text)
    assert set(changes) == {link for link, (mass, _, _) in nominal.items() if mass > 0} and len(changes) >= 6
    for link, change in changes.items():
        (m0, c0, i0), (m1, c1, i1) = nominal[link], real[link]
        assert 0.15 <= abs(m1 / m0 - 1) <= 0.25
        assert 0.01 - 1e-12 <= np.linalg.norm(c1 - c0) <= 0.03 + 1e-12
        assert change["inertia_scale"] > 0 and np.allclose(i1, change["inertia_scale"] * i0, rtol=CONSISTENCY_TOL, atol=0)
        principal = np.linalg.eigvalsh(i1)
        assert principal.min() > 0, link
        assert principal[0] + principal[1] >= principal[2] * (1 - CONSISTENCY_TOL), link  # the triangle inequality


@pytest.mark.parametrize("name", ARM_NAMES)
def test_the_regressor_columns_are_rnea_with_armature_damping_friction_and_mujocos_inverse(name, tmp_path):
    import mujoco

    arm = make_real_arm(name, 2)
    (tmp_path / "real.urdf").write_text(arm.urdf_text)
    oracle = PinocchioOracle(SimpleNamespace(joint_names=list(arm.spec.joints)), tmp_path / "real.urdf")
    q, qd, qdd = _states(oracle, np.random.default_rng(0), 5)
    theta = passive_parameters(oracle, arm.armature, arm.damping, arm.friction)
    linear = identification_regressor(oracle, q, qd, qdd) @ theta
    assert np.abs(linear - rigid_prediction(oracle, q, qd, qdd, arm.armature, arm.damping, arm.friction)).max() \
        < INVERSE_DYNAMICS_TOL
    model, dofs = mujoco_arm(arm, tmp_path)
    model.dof_frictionloss[:] = 0.0  # a constraint in MuJoCo: its sign(qd) torque is added below
    data = mujoco.MjData(model)
    qadr = model.jnt_qposadr[model.dof_jntid[dofs]]
    for k in range(len(q)):
        data.qpos[qadr], data.qvel[dofs], data.qacc[dofs] = q[k], qd[k], qdd[k]
        mujoco.mj_inverse(model, data)
        expected = data.qfrc_inverse[dofs] + arm.friction * np.sign(qd[k])
        assert np.abs(linear[k] - expected).max() < INVERSE_DYNAMICS_TOL * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("name", ARM_NAMES)
def test_the_base_parameters_predict_what_the_full_parameters_do(name, tmp_path):
    arm = make_real_arm(name, 4)
    (tmp_path / "real.urdf").write_text(arm.urdf_text)
    oracle = PinocchioOracle(SimpleNamespace(joint_names=list(arm.spec.joints)), tmp_path / "real.urdf")
    theta = passive_parameters(oracle, arm.armature, arm.damping, arm.friction)
    columns = base_columns(oracle)
    rng = np.random.default_rng(5)
    fit, held_out = (identification_regressor(oracle, *_states(oracle, rng, samples)) for samples in (150, 20))
    assert len(columns) < fit.shape[2]  # link inertials are not all identifiable from joint torques
    base = fit[:, :, columns].reshape(-1, len(columns))
    assert np.linalg.matrix_rank(base) == len(columns)
    beta, *_ = np.linalg.lstsq(base, (fit @ theta).reshape(-1), rcond=None)
    assert np.abs(held_out[:, :, columns] @ beta - held_out @ theta).max() < BASE_PREDICTION_TOL


def test_the_recording_follows_ros2_control_conventions(tmp_path):
    from rosbags.highlevel import AnyReader

    arm = make_real_arm("panda", 1)
    rec = record(arm, Excitation(0.5, 2, 0), 0.5, tmp_path, noise_seed=0)
    bag = write_ros2_control_bag(tmp_path / "bag", arm, rec)
    assert np.allclose(np.diff(rec.joint_time), 1 / JOINT_RATE)
    with AnyReader([bag]) as reader:
        states = [reader.deserialize(raw, c.msgtype) for c, _, raw in
                  reader.messages(connections=[c for c in reader.connections if c.topic == JOINT_STATES])]
        commands = [reader.deserialize(raw, c.msgtype) for c, _, raw in
                    reader.messages(connections=[c for c in reader.connections if c.topic == COMMANDS])]
    names = list(states[0].name)
    assert names == sorted(arm.spec.joints + arm.spec.extra_joints) and "panda_finger_joint1" in names
    order = [arm.spec.joints.index(j) for j in arm.spec.controller_joints]
    assert order != sorted(order) and len(commands) == len(rec.command)
    assert np.array_equal(commands[3].data, rec.command[3][order])
    joint = names.index("panda_joint4")
    assert states[2].position[joint] == rec.q[2][3] and states[2].position[names.index("panda_finger_joint2")] == 0.0
    assert abs(states[2].effort[joint] - rec.applied_effort[2][3]) < 0.3  # 0.05 N·m noise

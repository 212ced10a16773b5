"""The joint-torque regressor against RNEA and against Pinocchio's ``computeJointTorqueRegressor``."""

import dataclasses

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.dynamics.regressor import inertial_parameters, joint_torque_regressor, regressor_torques
from diffsim_ros.estimation import solvers
from diffsim_ros.estimation.data import Trajectory
from diffsim_ros.estimation.residuals import InverseDynamicsResidual
from diffsim_ros.model import RobotModel, load_robot_config
from oracles import BAXTER_LEFT, BAXTER_URDF, EXAMPLE_ARMS, PinocchioOracle, example_robot_urdf

PIN_TOL = 1e-9  # [N·m] per regressor entry or torque, as the other Pinocchio comparisons
N_STATES = 6

ROBOTS = {"baxter_left": (BAXTER_URDF, "base", "left_hand"), "baxter_full_tree": (BAXTER_URDF, None, None)}
ROBOTS.update({name: (example_robot_urdf(rel), base, tip) for name, (rel, base, tip) in EXAMPLE_ARMS.items()})


@pytest.fixture(scope="module", params=sorted(ROBOTS))
def setup(request):
    path, base, tip = ROBOTS[request.param]
    model = RobotModel.from_urdf(path, base_link=base, tip_link=tip)
    return model, PinocchioOracle(model, path)


def _states(model, seed, count=N_STATES):
    rng = np.random.default_rng(seed)
    lower = np.where(np.isfinite(model.lower.numpy()), model.lower.numpy(), -np.pi)
    upper = np.where(np.isfinite(model.upper.numpy()), model.upper.numpy(), np.pi)
    shape = (count, model.nq)
    return (torch.as_tensor(x) for x in (rng.uniform(lower, upper, shape), rng.uniform(-2, 2, shape),
                                         rng.uniform(-5, 5, shape)))


def test_regressor_times_parameters_is_rnea_batched(setup):
    model, _ = setup
    q, qd, qdd = _states(model, 0)
    y = joint_torque_regressor(model, q, qd, qdd)
    assert y.shape == (N_STATES, model.nq, model.nq, 10)
    np.testing.assert_allclose(regressor_torques(y, inertial_parameters(model)), dyn.rnea(model, q, qd, qdd),
                               atol=PIN_TOL, rtol=0)


def test_regressor_matches_pinocchio(setup):
    model, oracle = setup
    pin = oracle.pin
    columns = [slice(10 * (oracle.model.getJointId(name) - 1), 10 * oracle.model.getJointId(name))
               for name in model.joint_names]
    q, qd, qdd = _states(model, 1)
    y = joint_torque_regressor(model, q, qd, qdd).numpy()
    for k in range(N_STATES):
        expected = pin.computeJointTorqueRegressor(oracle.model, oracle.data, oracle.q(q[k].numpy()),
                                                   oracle.v(qd[k].numpy()), oracle.v(qdd[k].numpy()))
        expected = expected[oracle.v_index]
        for j, cols in enumerate(columns):
            np.testing.assert_allclose(y[k, :, j, :], expected[:, cols], atol=PIN_TOL, rtol=0)


def test_the_payload_is_in_the_parameters_not_the_regressor():
    """A payload changes pi of the payload frame's body only; the regressor is that of the bare arm."""
    model = load_robot_config(BAXTER_LEFT).build_model()
    loaded = model.with_payload(1.3, (0.02, -0.01, 0.05))
    q, qd, qdd = _states(model, 2)
    y = joint_torque_regressor(model, q, qd, qdd)
    np.testing.assert_array_equal(y.numpy(), joint_torque_regressor(loaded, q, qd, qdd).numpy())
    changed = (inertial_parameters(loaded) - inertial_parameters(model)).abs().sum(-1) > 0
    assert changed.nonzero().flatten().tolist() == [model.frame(model.payload_frame).body]
    np.testing.assert_allclose(regressor_torques(y, inertial_parameters(loaded)), dyn.rnea(loaded, q, qd, qdd),
                               atol=PIN_TOL, rtol=0)


def test_rnea_is_linear_in_the_parameters_the_regressor_names():
    """Y is the derivative of RNEA with respect to pi: central differences of RNEA in a body's mass."""
    model = load_robot_config(BAXTER_LEFT).build_model()
    q, qd, qdd = _states(model, 3, count=2)
    y = joint_torque_regressor(model, q, qd, qdd)
    body, step = 4, 1e-4
    mass = model.params.mass
    up, down = (model.replace(params=dataclasses.replace(model.params, mass=mass + sign * step * torch.eye(model.nq)[body]))
                for sign in (1, -1))
    fd = (dyn.rnea(up, q, qd, qdd) - dyn.rnea(down, q, qd, qdd)) / (2 * step)
    # d pi / d m at a fixed COM and COM inertia: the mass column, m c and the point inertia of the COM
    dpi = (inertial_parameters(up) - inertial_parameters(down))[body] / (2 * step)
    np.testing.assert_allclose(fd, (y[..., body, :] * dpi).sum(-1), atol=1e-8, rtol=0)


# --- the inverse-dynamics loss through the regressor ------------------------------------------

FD_STEP = 1e-6  # relative central-difference step
FD_TOL = 1e-6  # [unit residual] central differences of a float64 residual of unit scale


def _motion(model, seed, samples=300):
    rng = np.random.default_rng(seed)
    t = np.arange(samples)[:, None] * 0.01
    phase = rng.uniform(0, 2 * np.pi, model.nq)
    q = 0.5 * (model.lower.numpy() + model.upper.numpy()) + 0.4 * np.sin(1.3 * t + phase)
    qd, qdd = 0.52 * np.cos(1.3 * t + phase), -0.676 * np.sin(1.3 * t + phase)
    return [Trajectory(dt=0.01, q=q, qd=qd, qdd=qdd, tau=rng.normal(0, 1, q.shape))]


def _with(model, names, z):
    """``model`` with the named parameters set from the flat coordinates ``z``."""
    values, at = {}, 0
    for name in names:
        size = model.get_parameter(name).numel()
        values[name] = z[at:at + size].reshape(model.get_parameter(name).shape)
        at += size
    return model.with_parameters(values)


def _central(fn, z):
    columns = []
    for i in range(z.shape[0]):
        e = torch.zeros_like(z)
        e[i] = FD_STEP * max(1.0, abs(float(z[i])))
        columns.append((fn(z + e) - fn(z - e)) / (2 * float(e[i])))
    return torch.stack(columns, 1)


@pytest.mark.parametrize("names", [("payload.mass", "payload.com", "left_e1.damping"),
                                   ("left_w1.origin.xyz", "payload.mass")], ids=["inertial", "kinematic"])
def test_inverse_dynamics_loss_is_rnea_and_its_jacobian_is_exact(names):
    """Through the regressor (inertial parameters) or the recursion (a joint origin being fitted):
    the same residual as RNEA's, and forward-mode Jacobians equal to central differences."""
    model = load_robot_config(BAXTER_LEFT).build_model().with_payload(1.1, (0.01, 0.0, 0.04))
    assert set(names) <= set(model.parameter_names())
    block = InverseDynamicsResidual(_motion(model, 4), model, torque_std=0.05)
    q, qd, qdd = block.q, block.qd, block.qdd
    expected = (dyn.rnea(model, q, qd, qdd) - dyn.passive_torques(model, q, qd) - block.tau) / block.scale
    np.testing.assert_allclose(block(model), expected.reshape(-1), atol=1e-9, rtol=0)
    z0 = torch.cat([model.get_parameter(n).reshape(-1) for n in names])
    fn = lambda z: block(_with(model, names, z))  # noqa: E731
    value, jac = solvers.forward_jacobian(fn, z0)
    np.testing.assert_allclose(value, expected.reshape(-1), atol=1e-9, rtol=0)
    np.testing.assert_allclose(jac, _central(fn, z0), atol=FD_TOL, rtol=0)
    assert bool(jac.abs().sum(0).gt(0).all())  # every coordinate moves the residual


def test_the_loss_takes_the_regressor_only_for_the_kinematics_it_was_built_with(monkeypatch):
    """The recursion is not called while only inertial parameters change, and is for other kinematics."""
    from diffsim_ros.estimation import residuals

    model = load_robot_config(BAXTER_LEFT).build_model()
    block = InverseDynamicsResidual(_motion(model, 5, samples=40), model, torque_std=0.05)
    calls = []
    monkeypatch.setattr(residuals, "rnea", lambda *args: calls.append(1) or dyn.rnea(*args))
    block(model.with_payload(0.7))
    assert calls == []
    moved = model.with_parameters({"left_w1.origin.xyz": model.get_parameter("left_w1.origin.xyz") + 1e-3})
    block(moved)
    assert calls == [1]


def test_the_compiled_regressor_follows_its_inputs_and_refuses_gradients():
    """One compiled implementation: numpy (regressor_array on a FastDynamics snapshot) and torch give the same
    numbers, in the inputs' dtype and shape; inputs that require a gradient are refused by name."""
    from diffsim_ros.dynamics.fast import FastDynamics
    from diffsim_ros.dynamics.regressor import regressor_array

    model = load_robot_config(BAXTER_LEFT).build_model()
    q, qd, qdd = _states(model, 4, count=3)
    y = joint_torque_regressor(model, q, qd, qdd)
    np.testing.assert_array_equal(regressor_array(FastDynamics.from_model(model), q.numpy(), qd.numpy(), qdd.numpy()),
                                  y.numpy())
    one = joint_torque_regressor(model, q[0], qd[0], qdd[0])
    assert one.shape == (model.nq, model.nq, 10)
    np.testing.assert_array_equal(one.numpy(), y[0].numpy())
    single = model.to(dtype=torch.float32)
    y32 = joint_torque_regressor(single, q.float(), qd.float(), qdd.float())
    assert y32.dtype == torch.float32
    np.testing.assert_allclose(y32.numpy(), y.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="not differentiable"):
        joint_torque_regressor(model, q.requires_grad_(), qd, qdd)
    with torch.no_grad():
        np.testing.assert_array_equal(joint_torque_regressor(model, q, qd, qdd).numpy(), y.numpy())

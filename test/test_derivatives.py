"""Compiled analytic derivatives: forward dynamics against Pinocchio, the rigid step against autograd.

``aba_derivatives`` is checked against Pinocchio's ``computeABADerivatives`` on every reference
arm (chains, a tree, a prismatic joint). :class:`FastRigidStep` (implicit Euler with springs,
damping, smoothed Coulomb friction and a payload) is checked against the torch
RigidBodySimulator it compiles: values, Jacobians in state and torque by autograd, and the
Jacobian in every identified parameter by autograd through ``RobotModel.with_parameters``.
"""

import numpy as np
import pytest
import torch

from diffsim_ros.dynamics.derivatives import aba_derivatives
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.model import RobotModel
from diffsim_ros.sim import RigidBodySimulator
from diffsim_ros.sim.rigid_fast import PARAMETER_GROUPS, FastRigidStep
from oracles import PinocchioOracle
from test_dynamics_reference import ROBOTS
from test_springs import LAWS, sprung_baxter, states

PIN_TOL = 1e-9  # relative to the largest entry: compiled derivatives vs Pinocchio
AUTOGRAD_TOL = 1e-9  # relative to the largest entry (and at least 1): compiled step vs torch autograd
DT = 0.01  # [s]
SAMPLES = 3


def _close(actual, expected, tol):
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("robot", sorted(ROBOTS))
def test_aba_derivatives_match_pinocchio(robot):
    path, base, tip = ROBOTS[robot]
    model = RobotModel.from_urdf(path, base_link=base, tip_link=tip)
    oracle = PinocchioOracle(model, path)
    pin, fast = oracle.pin, FastDynamics.from_model(model)
    rng = np.random.default_rng(3)
    lower = np.where(np.isfinite(model.lower.numpy()), model.lower.numpy(), -np.pi)
    upper = np.where(np.isfinite(model.upper.numpy()), model.upper.numpy(), np.pi)
    for _ in range(SAMPLES):
        q, qd, tau = rng.uniform(lower, upper), rng.uniform(-2, 2, model.nq), rng.uniform(-5, 5, model.nq)
        pin.computeABADerivatives(oracle.model, oracle.data, oracle.q(q), oracle.v(qd), oracle.v(tau))
        qdd, d_q, d_qd, minv = aba_derivatives(fast, q, qd, tau)
        _close(qdd, oracle.sel(oracle.data.ddq), PIN_TOL)
        _close(d_q, oracle.sel2(oracle.data.ddq_dq), PIN_TOL)
        _close(d_qd, oracle.sel2(oracle.data.ddq_dv), PIN_TOL)
        minv_ref = np.triu(oracle.data.Minv) + np.triu(oracle.data.Minv, 1).T  # Pinocchio fills the upper triangle
        _close(minv, oracle.sel2(minv_ref), PIN_TOL)


def _reference_jacobians(simulator, q, qd, tau):
    def step(q_, qd_, tau_):
        return torch.cat(simulator.joint_step(q_, qd_, tau_))

    value = step(q, qd, tau).detach().numpy()
    d_q, d_qd, d_tau = torch.autograd.functional.jacobian(step, (q, qd, tau))
    return value, torch.cat([d_q, d_qd], 1).numpy(), d_tau.numpy()


def _reference_parameter_jacobian(simulator, q, qd, tau):
    """``{column name: d(q+, qd+)/d theta (2n,)}`` by autograd through ``with_parameters``."""
    model = simulator.model
    values = {
        name: model.get_parameter(name).detach().clone().requires_grad_(True)
        for name in model.parameter_names()
        # Geometry is not a column of the compiled step, nor are the efforts' bias and delay (a
        # sensor's parameters: no dynamics depend on them).
        if not name.endswith(("origin.xyz", "effort_bias")) and name != "efforts.delay"
    }
    out = torch.cat(simulator.with_model(model.with_parameters(values)).joint_step(q, qd, tau))
    rows = [torch.autograd.grad(out[r], list(values.values()), allow_unused=True, retain_graph=True) for r in range(out.numel())]
    columns = {}
    for k, (name, value) in enumerate(values.items()):
        grad = torch.stack([torch.zeros_like(value) if row[k] is None else row[k] for row in rows]).numpy()
        if grad.ndim == 1:
            columns[name] = grad
        else:
            columns.update({f"{name}[{c}]": grad[:, c] for c in range(grad.shape[1])})
    return columns


MODELS = {
    "baxter_springs_payload": lambda: sprung_baxter().with_payload(1.3, (0.01, 0.02, 0.05)),
    "prismatic_springs": LAWS["prismatic"],
}


@pytest.mark.parametrize("substeps", [1, 2])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_step_and_jacobians_match_autograd(name, substeps):
    model = MODELS[name]()
    simulator = RigidBodySimulator(model, DT, substeps=substeps)
    fast = FastRigidStep.from_simulator(simulator)
    q, qd = states(model, SAMPLES, seed=7, speed=1.5)
    tau = torch.as_tensor(np.random.default_rng(8).normal(0.0, 5.0, (SAMPLES, model.nq)))
    for i in range(SAMPLES):
        value, d_state, d_torque = _reference_jacobians(simulator, q[i], qd[i], tau[i])
        plain = fast.step(q[i].numpy(), qd[i].numpy(), tau[i].numpy())
        out = fast.jacobians(q[i].numpy(), qd[i].numpy(), tau[i].numpy(), parameters=True)
        _close(np.concatenate(plain), value, AUTOGRAD_TOL)
        _close(np.concatenate([out.q, out.qd]), value, AUTOGRAD_TOL)
        _close(out.d_state, d_state, AUTOGRAD_TOL)
        _close(out.d_torque, d_torque, AUTOGRAD_TOL)
        reference = _reference_parameter_jacobian(simulator, q[i], qd[i], tau[i])
        assert sorted(fast.parameter_columns) == sorted(reference)
        for c, column in enumerate(fast.parameter_columns):
            _close(out.d_parameters[:, c], reference[column], AUTOGRAD_TOL)


def test_without_passive_terms_and_parameter_subsets():
    model = sprung_baxter()
    simulator = RigidBodySimulator(model, DT, passive=False)
    fast = FastRigidStep.from_simulator(simulator, parameters=("payload",))
    assert fast.parameter_columns == ("payload.mass", "payload.com[0]", "payload.com[1]", "payload.com[2]")
    q, qd = states(model, 1, seed=9)
    tau = torch.zeros(model.nq, dtype=torch.float64)
    value, d_state, d_torque = _reference_jacobians(simulator, q[0], qd[0], tau)
    out = fast.jacobians(q[0].numpy(), qd[0].numpy(), tau.numpy())
    assert out.d_parameters is None
    _close(np.concatenate([out.q, out.qd]), value, AUTOGRAD_TOL)
    _close(out.d_state, d_state, AUTOGRAD_TOL)
    _close(out.d_torque, d_torque, AUTOGRAD_TOL)


def test_bad_input_is_named():
    model = sprung_baxter()
    with pytest.raises(ValueError, match="implicit_euler"):
        FastRigidStep.from_simulator(RigidBodySimulator(model, DT, integrator="rk4"))
    with pytest.raises(ValueError, match="unknown parameter groups"):
        FastRigidStep(model, DT, parameters=PARAMETER_GROUPS + ("geometry",))
    with pytest.raises(ValueError, match="dt must be positive"):
        FastRigidStep(model, 0.0)
    fast = FastRigidStep(model, DT)
    with pytest.raises(ValueError, match=r"q must have shape \(7,\)"):
        fast.step(np.zeros(6), np.zeros(7), np.zeros(7))
    broken = model.with_parameters({f"{b}.mass": 0.0 for b in model.body_names} | {f"{b}.inertia": [0.0] * 6 for b in model.body_names})
    with pytest.raises(ArithmeticError, match="singular"):
        FastRigidStep(broken, DT, passive=False).step(np.zeros(7), np.zeros(7), np.zeros(7))

"""Gradients of PBD rollouts: autograd against float64 central finite differences.

Directional derivatives ``g . v`` (random v) are compared for the initial state, the torque
sequence and every group of model parameters, for all three solvers.
"""

import dataclasses

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwad

from diffsim_ros.sim import PBDSimulator
from diffsim_ros.sim.rigid import RigidBodySimulator
from test_pbd_references import baxter, random_state

GRAD_RTOL = 1e-7  # relative error of a directional derivative
GRAD_ATOL = 1e-9  # absolute floor: rounding of the differences (|loss| ~ 1)
FD_STEP = 1e-4  # central-difference step (Richardson-extrapolated, error O(step^4))
CHECKPOINT_TOL = 1e-12  # checkpointed vs plain gradients
STEPS = 3

PARAMETER_FIELDS = [
    "mass",
    "com",
    "inertia",
    "joint_origin_xyz",
    "damping",
    "friction",
    "spring_stiffness",
    "spring_offset",
    "spring_alpha1",
    "spring_l1",
    "spring_l2",
    "spring_rest_length",
    "payload_mass",
    "payload_com",
]


def _setup(solver="direct"):
    # Friction stays 0 here: the smoothed Coulomb law (tanh(u / 0.01 rad/s)) has huge higher
    # derivatives near u = 0, which finite differences cannot resolve; its gradient is
    # still checked along a friction direction from 0.
    model = baxter().with_payload(0.8, (0.01, 0.0, 0.05))
    q0, qd0 = random_state(model, 11, speed=1.0)
    rng = np.random.default_rng(12)
    tau = torch.as_tensor(rng.normal(0.0, 2.0, (STEPS, model.nq)), dtype=model.dtype)
    weights = torch.as_tensor(rng.normal(size=(2, model.nq)), dtype=model.dtype)
    sim = PBDSimulator(model, dt=0.01, substeps=2, iterations=2 if solver == "direct" else 5, solver=solver, on_residual="ignore")
    return sim, q0, qd0, tau, weights


def _loss(sim, q0, qd0, tau, weights, checkpoint_every=None):
    q, qd = sim.rollout(q0, qd0, tau, checkpoint_every=checkpoint_every)
    return (weights[0] * q[-1]).sum() + 0.1 * (weights[1] * qd[-1]).sum() + 0.01 * (q**2).sum()


def _check_direction(grad, value_of, direction, label=""):
    """Compare ``grad . direction`` with the central difference of ``value_of`` along it.

    Richardson extrapolation of the steps h and 2h cancels the O(h^2) truncation error.
    """
    with torch.no_grad():
        central = [(value_of(k * FD_STEP) - value_of(-k * FD_STEP)) / (2 * k * FD_STEP) for k in (1, 2)]
        numeric = (4 * central[0] - central[1]) / 3
    analytic = float((grad * direction).sum())
    assert abs(analytic - float(numeric)) <= GRAD_ATOL + GRAD_RTOL * abs(float(numeric)), (label, analytic, float(numeric))


@pytest.mark.parametrize("solver", ["direct", "gauss_seidel", "jacobi"])
def test_gradients_of_initial_state_and_torques(solver):
    sim, q0, qd0, tau, weights = _setup(solver)
    inputs = [t.clone().requires_grad_(True) for t in (q0, qd0, tau)]
    _loss(sim, *inputs, weights).backward()
    rng = np.random.default_rng(13)
    for index, tensor in enumerate(inputs):
        direction = torch.as_tensor(rng.normal(size=tensor.shape), dtype=tensor.dtype)

        def value_of(step, index=index, direction=direction):
            moved = [t.detach() + (step * direction if k == index else 0.0) for k, t in enumerate(inputs)]
            return _loss(sim, *moved, weights)

        _check_direction(tensor.grad, value_of, direction)


def test_gradients_of_every_model_parameter():
    sim, q0, qd0, tau, weights = _setup()
    model = sim.model
    leaves = {name: getattr(model.params, name).clone().requires_grad_(True) for name in PARAMETER_FIELDS}
    params = dataclasses.replace(model.params, **leaves)
    _loss(sim.with_model(model.replace(params=params)), q0, qd0, tau, weights).backward()
    rng = np.random.default_rng(14)
    for name, leaf in leaves.items():
        assert leaf.grad is not None and bool(torch.isfinite(leaf.grad).all()), name
        scale = leaf.detach().abs().mean().clamp_min(1e-2)
        direction = torch.as_tensor(rng.normal(size=leaf.shape), dtype=leaf.dtype) * scale

        def value_of(step, name=name, direction=direction):
            moved = dataclasses.replace(model.params, **{name: getattr(model.params, name) + step * direction})
            return _loss(sim.with_model(model.replace(params=moved)), q0, qd0, tau, weights)

        _check_direction(leaf.grad, value_of, direction, name)


def test_checkpointing_gives_the_same_gradients():
    sim, q0, qd0, tau, weights = _setup()
    grads = []
    for every in (None, 2):
        inputs = [t.clone().requires_grad_(True) for t in (q0, qd0, tau)]
        _loss(sim, *inputs, weights, checkpoint_every=every).backward()
        grads.append([t.grad for t in inputs])
    for plain, checked in zip(*grads):
        assert float((plain - checked).abs().max()) < CHECKPOINT_TOL


def _parameter_leaves(model):
    leaves = {name: getattr(model.params, name).clone().requires_grad_(True) for name in PARAMETER_FIELDS}
    return leaves, model.replace(params=dataclasses.replace(model.params, **leaves))


def _graph_size(tensor):
    """Autograd nodes reachable from ``tensor``."""
    seen, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


@pytest.mark.parametrize("simulator", ["pbd", "rigid"])
def test_checkpointing_gives_the_same_parameter_gradients_without_keeping_the_graph(simulator):
    """Parameter gradients flow out of checkpointed blocks (through ``autograd.grad`` too), and
    the graph kept between forward and backward passes is per block, not per operation."""
    sim, q0, qd0, tau, weights = _setup()
    if simulator == "rigid":
        sim = RigidBodySimulator(sim.model, dt=0.01, substeps=2)
    leaves, model = _parameter_leaves(sim.model)
    sim = sim.with_model(model)
    plain = _loss(sim, q0, qd0, tau, weights)
    checked = _loss(sim, q0, qd0, tau, weights, checkpoint_every=1)
    assert _graph_size(checked) * 10 < _graph_size(plain)
    grads_plain = torch.autograd.grad(plain, list(leaves.values()))
    grads_checked = torch.autograd.grad(checked, list(leaves.values()))
    for name, a, b in zip(leaves, grads_plain, grads_checked):
        assert float((a - b).abs().max()) <= CHECKPOINT_TOL * max(1.0, float(a.abs().max())), name


def test_checkpointed_rollouts_support_forward_mode():
    """Forward-mode AD (used by identification) passes through checkpointed rollouts."""
    sim, q0, qd0, tau, weights = _setup()
    direction = torch.ones_like(sim.model.params.damping)
    results = []
    for every in (None, 1):
        with fwad.dual_level():
            dual = fwad.make_dual(sim.model.params.damping, direction)
            model = sim.model.replace(params=dataclasses.replace(sim.model.params, damping=dual))
            loss = _loss(sim.with_model(model), q0, qd0, tau, weights, checkpoint_every=every)
            results.append(fwad.unpack_dual(loss).tangent)
    assert float((results[0] - results[1]).abs()) <= CHECKPOINT_TOL * max(1.0, float(results[0].abs()))


def test_particle_rollout_gradients_with_checkpointing():
    sim, q0, qd0, tau, _ = _setup()
    grads = []
    for every in (None, 2):
        start = q0.clone().requires_grad_(True)
        states = sim.simulate(sim.initial_state(start, qd0), tau, checkpoint_every=every)
        (states.pos[..., -1, :] ** 2).sum().backward()
        grads.append(start.grad)
    assert float((grads[0] - grads[1]).abs().max()) < CHECKPOINT_TOL


def test_gradients_are_finite_without_damping_or_friction():
    """No sqrt/normalization singularity at b = 0, mu = 0 or at zero constraint error."""
    model = baxter()
    leaves = {name: getattr(model.params, name).clone().mul(0.0).requires_grad_(True) for name in ("damping", "friction")}
    params = dataclasses.replace(model.params, **leaves)
    sim = PBDSimulator(model.replace(params=params), dt=0.01, substeps=2)
    q0 = torch.zeros(model.nq, dtype=model.dtype, requires_grad=True)
    q, qd = sim.rollout(q0, torch.zeros(model.nq, dtype=model.dtype), torch.zeros(2, model.nq, dtype=model.dtype))
    (q.sum() + qd.sum()).backward()
    for tensor in (q0, *leaves.values()):
        assert bool(torch.isfinite(tensor.grad).all())
        assert float(tensor.grad.abs().sum()) > 0.0

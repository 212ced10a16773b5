"""Physics identities, finite-difference gradient checks and batching of the dynamics."""

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim import RigidBodySimulator
from oracles import BAXTER_LEFT

IDENTITY_TOL = 1e-10
BATCH_TOL = 1e-12
GRADCHECK_EPS = 1e-6
GRADCHECK_ATOL = 1e-6
SPRING_TORQUE_AT_MINUS_HALF = 52.0  # issue #2: nominal spring torque at s1 = -0.5 rad [N·m]
GRAVITY_TORQUE_AT_MINUS_HALF = 49.0  # issue #2: bare-arm gravity torque there [N·m]


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model().with_payload(0.8, (0.01, -0.02, 0.04))


def _random(shape, seed, scale=1.0):
    return scale * (2 * torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) - 1)


def test_equation_of_motion_identities(model):
    q, qd, qdd = _random((3, 7), 0), _random((3, 7), 1, 2.0), _random((3, 7), 2, 3.0)
    mass = dyn.mass_matrix(model, q)
    nle = dyn.nonlinear_effects(model, q, qd)
    tau = dyn.rnea(model, q, qd, qdd)
    torch.testing.assert_close((mass @ qdd[..., None])[..., 0] + nle, tau, atol=IDENTITY_TOL, rtol=0)
    torch.testing.assert_close(dyn.aba(model, q, qd, tau), qdd, atol=IDENTITY_TOL, rtol=0)
    torch.testing.assert_close(nle, dyn.coriolis_torques(model, q, qd) + dyn.gravity_torques(model, q), atol=IDENTITY_TOL, rtol=0)
    torch.testing.assert_close(dyn.gravity_torques(model, q), dyn.rnea(model, q, 0 * qd, 0 * qdd), atol=IDENTITY_TOL, rtol=0)
    torch.testing.assert_close(mass, mass.transpose(-1, -2), atol=IDENTITY_TOL, rtol=0)
    assert bool((torch.linalg.eigvalsh(mass) > 0).all())
    # Passive terms enter forward dynamics as applied torques.
    passive = dyn.passive_torques(model, q, qd)
    torch.testing.assert_close(dyn.forward_dynamics(model, q, qd, tau, passive=True), dyn.aba(model, q, qd, tau + passive), atol=IDENTITY_TOL, rtol=0)
    # Armature: qdd = (M + diag(a))^-1 (tau - nle).
    armature = _random((3, 7), 7).abs()
    expected = torch.linalg.solve(mass + torch.diag_embed(armature), (tau - nle)[..., None])[..., 0]
    torch.testing.assert_close(dyn.aba(model, q, qd, tau, armature=armature), expected, atol=IDENTITY_TOL, rtol=0)


def test_gravity_is_the_gradient_of_potential_energy(model):
    q = _random((7,), 3).requires_grad_()
    (grad,) = torch.autograd.grad(dyn.potential_energy(model, q), q)
    torch.testing.assert_close(grad, dyn.gravity_torques(model, q.detach()), atol=IDENTITY_TOL, rtol=0)


def test_power_balance(model):
    """d/dt (T + V) = qd . tau along the rigid-body dynamics (no passive terms)."""
    q, qd, tau = _random((7,), 4), _random((7,), 5, 2.0), _random((7,), 6, 5.0)
    qdd = dyn.aba(model, q, qd, tau)
    q_, qd_ = q.clone().requires_grad_(), qd.clone().requires_grad_()
    energy = dyn.kinetic_energy(model, q_, qd_) + dyn.potential_energy(model, q_)
    dq, dqd = torch.autograd.grad(energy, (q_, qd_))
    torch.testing.assert_close((dq * qd).sum() + (dqd * qdd).sum(), (qd * tau).sum(), atol=IDENTITY_TOL, rtol=0)


def test_spring_law_and_issue_figures(model):
    q = torch.zeros(7, dtype=torch.float64)
    q[1] = -0.5
    spring = dyn.spring_torques(model, q)[1].item()
    bare = load_robot_config(BAXTER_LEFT).build_model()
    gravity = dyn.gravity_torques(bare, q)[1].item()
    assert spring == pytest.approx(-SPRING_TORQUE_AT_MINUS_HALF, abs=1.0)
    assert gravity == pytest.approx(-GRAVITY_TORQUE_AT_MINUS_HALF, abs=1.0)
    qs = _random((5, 7), 7).requires_grad_()
    (grad,) = torch.autograd.grad(dyn.spring_potential_energy(model, qs).sum(), qs)
    torch.testing.assert_close(-grad, dyn.spring_torques(model, qs.detach()), atol=IDENTITY_TOL, rtol=0)
    # Damping and friction oppose motion and friction is bounded by its coefficient.
    qd = _random((7,), 8, 3.0)
    fric = model.with_parameters({"left_e1.friction": 2.0})
    assert bool((dyn.damping_torques(model, qd) * qd <= 0).all())
    assert abs(dyn.friction_torques(fric, qd)[3].item()) <= 2.0


def test_batched_calls_match_unbatched(model):
    q, qd, qdd = _random((2, 3, 7), 9), _random((2, 3, 7), 10), _random((2, 3, 7), 11)
    batched = {
        "rnea": dyn.rnea(model, q, qd, qdd),
        "gravity": dyn.gravity_torques(model, q),
        "mass": dyn.mass_matrix(model, q),
        "aba": dyn.aba(model, q, qd, qdd),
        "fk": dyn.forward_kinematics(model, q, "left_hand"),
        "jac": dyn.frame_jacobian(model, q, "left_hand"),
        "spring": dyn.spring_torques(model, q),
    }
    for i in range(2):
        for j in range(3):
            single = {
                "rnea": dyn.rnea(model, q[i, j], qd[i, j], qdd[i, j]),
                "gravity": dyn.gravity_torques(model, q[i, j]),
                "mass": dyn.mass_matrix(model, q[i, j]),
                "aba": dyn.aba(model, q[i, j], qd[i, j], qdd[i, j]),
                "fk": dyn.forward_kinematics(model, q[i, j], "left_hand"),
                "jac": dyn.frame_jacobian(model, q[i, j], "left_hand"),
                "spring": dyn.spring_torques(model, q[i, j]),
            }
            for key, value in single.items():
                torch.testing.assert_close(batched[key][i, j], value, atol=BATCH_TOL, rtol=0)
    # Broadcasting: one configuration, many velocities.
    tau = dyn.rnea(model, q[0, 0], qd[0], qdd[0])
    assert tau.shape == (3, 7)


def _gradcheck(fn, *inputs):
    inputs = tuple(x.detach().clone().requires_grad_() for x in inputs)
    assert torch.autograd.gradcheck(fn, inputs, eps=GRADCHECK_EPS, atol=GRADCHECK_ATOL)


def test_state_gradients_match_finite_differences(model):
    q, qd, qdd = _random((2, 7), 12), _random((2, 7), 13), _random((2, 7), 14)
    _gradcheck(lambda a, b, c: dyn.rnea(model, a, b, c), q, qd, qdd)
    _gradcheck(lambda a, b, c: dyn.aba(model, a, b, c), q, qd, qdd)
    _gradcheck(lambda a: dyn.mass_matrix(model, a), q)
    _gradcheck(lambda a: dyn.gravity_torques(model, a), q)
    _gradcheck(lambda a: dyn.forward_kinematics(model, a, "left_hand"), q)
    _gradcheck(lambda a: dyn.frame_jacobian(model, a, "left_hand"), q)
    _gradcheck(lambda a, b: dyn.passive_torques(model, a, b), q, qd)


@pytest.mark.parametrize(
    "name",
    [
        "left_lower_shoulder.mass",
        "left_upper_elbow.com",
        "left_lower_forearm.inertia",
        "left_e1.origin.xyz",
        "left_s1.spring.stiffness",
        "left_s1.spring.offset",
        "left_s1.spring.l1",
        "left_w0.damping",
        "payload.mass",
        "payload.com",
    ],
)
def test_parameter_gradients_match_finite_differences(model, name):
    q, qd, qdd = _random((2, 7), 15), _random((2, 7), 16), _random((2, 7), 17)
    value = model.get_parameter(name).detach().clone()

    def forward(v):
        m = model.with_parameters({name: v})
        return torch.cat([
            dyn.rnea(m, q, qd, qdd),
            dyn.aba(m, q, qd, qdd + 1.0),
            dyn.passive_torques(m, q, qd),
            dyn.mass_matrix(m, q).flatten(-2),
        ], dim=-1)

    _gradcheck(forward, value)


def test_rigid_body_simulator_gradients_and_energy(model):
    """The reference integrator is differentiable and conserves energy without passive terms."""
    sim = RigidBodySimulator(model, dt=0.005, substeps=4, integrator="rk4", passive=False)
    q0 = torch.tensor([0.3, -0.5, 0.2, 1.0, -0.4, 0.6, 0.1], dtype=torch.float64)
    zero = torch.zeros(200, 7, dtype=torch.float64)
    q, qd = sim.rollout(q0, torch.zeros(7, dtype=torch.float64), zero)
    energy = dyn.kinetic_energy(model, q, qd) + dyn.potential_energy(model, q)
    assert (energy.max() - energy.min()).item() < 1e-4 * max(1.0, energy.abs().max().item())
    short = RigidBodySimulator(model, dt=0.01, substeps=2)
    tau = _random((5, 7), 18, 2.0)
    _gradcheck(lambda a, b, t: torch.cat(short.rollout(a, b, t), dim=-1), q0, torch.zeros(7, dtype=torch.float64), tau)
    # Checkpointed rollouts give the same values and gradients.
    t1 = tau.clone().requires_grad_()
    t2 = tau.clone().requires_grad_()
    short.rollout(q0, q0 * 0, t1)[0].square().sum().backward()
    short.rollout(q0, q0 * 0, t2, checkpoint_every=2)[0].square().sum().backward()
    torch.testing.assert_close(t1.grad, t2.grad, atol=IDENTITY_TOL, rtol=0)

"""The compiled forward rollout (sim.pbd.fast) against the torch PBD step it reimplements.

Both implement the same XPBD step; the kernel carries rotation matrices instead of
quaternions and sums in another order, so they agree to rounding, amplified by the
dynamics over a rollout. ``CHAOS_FACTOR`` bounds the disagreement by that amplification:
the torch step against itself from a start perturbed by one ulp.
"""

import warnings

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwad

from diffsim_ros.dynamics import point_spring_lengths
from diffsim_ros.model import RobotModel, RobotModelError
from diffsim_ros.sim import PBDConvergenceWarning, PBDError, PBDSimulator
from diffsim_ros.sim.pbd import FreeBase
from diffsim_ros.sim.pbd.fast import FastPBD, fast_rollout_supported
from test_pbd_references import baxter, chain_urdf, random_state
from test_springs import BAND, sprung_baxter

STEPS = 60  # control periods of 10 ms per comparison
AGREEMENT_TOL = 1e-9  # [rad, rad/s] kernel vs torch, the starts inside the limits
CHAOS_FACTOR = 20.0  # kernel-vs-torch difference at most this times the torch one-ulp sensitivity
RESIDUAL_TOLERANCE = 1e-6  # [m or rad] a tolerance the paper's one-step Jacobi cannot meet


def _inputs(model, batch, seed, torque_scale=2.0):
    """Starts inside the limits and smooth torque sequences, (B, n) and (B, T, n)."""
    states = [random_state(model, seed + k, speed=1.0) for k in range(batch)]
    q0, qd0 = torch.stack([s[0] for s in states]), torch.stack([s[1] for s in states])
    time = torch.arange(STEPS, dtype=model.dtype)[:, None] * 0.01
    phase = torch.arange(model.nq, dtype=model.dtype)
    tau = torque_scale * torch.sin(2.0 * time * (1.0 + phase) + torch.arange(batch, dtype=model.dtype)[:, None, None])
    return q0, qd0, tau


def _rollouts(model, q0, qd0, tau, **settings):
    fast = PBDSimulator(model, on_residual="ignore", **settings)
    slow = PBDSimulator(model, on_residual="ignore", fast=False, **settings)
    with torch.no_grad():
        return fast.rollout(q0, qd0, tau), slow.rollout(q0, qd0, tau), slow.rollout(q0 * (1.0 + 2e-16), qd0, tau)


def _difference(runs):
    """Kernel-vs-torch difference and the torch step's one-ulp sensitivity of :func:`_rollouts`' runs."""
    (q, qd), (q_ref, qd_ref), (q_ulp, qd_ulp) = runs
    sensitivity = max(float((q_ulp - q_ref).abs().max()), float((qd_ulp - qd_ref).abs().max()), 1e-13)
    return max(float((q - q_ref).abs().max()), float((qd - qd_ref).abs().max())), sensitivity


@pytest.mark.parametrize(
    "settings",
    [
        dict(substeps=1, iterations=2),
        dict(substeps=2, iterations=2),
        dict(substeps=10, iterations=2),
        dict(substeps=3, iterations=3, compliance=1e-7),
    ],
    ids=["1x2", "2x2", "10x2-default", "3x3-compliant"],
)
def test_kernel_matches_torch_step(settings):
    # Baxter: shoulder spring, damping, friction added, sinusoidal torques. The arm falls
    # onto its limits within the rollout; limit contacts amplify rounding by orders of
    # magnitude (see the next test), so this comparison runs without them.
    model = baxter()
    model = model.with_parameters({f"{name}.friction": 0.3 for name in model.joint_names})
    q0, qd0, tau = _inputs(model, 3, 10)
    runs = _rollouts(model, q0, qd0, tau, limits=False, **settings)
    difference, sensitivity = _difference(runs)
    q = runs[0][0]
    assert difference < AGREEMENT_TOL
    assert difference < CHAOS_FACTOR * sensitivity
    assert float((q - q0[:, None]).abs().max()) > 0.5  # the arm moved


@pytest.mark.parametrize(
    "settings", [dict(substeps=2, iterations=2), dict(substeps=3, iterations=3, compliance=1e-7)], ids=["2x2", "3x3-compliant"]
)
def test_kernel_matches_torch_step_with_every_spring_law(settings):
    # Lever, torsion (its dashpot in the implicit rows), a band going slack and taut and a gas
    # spring from the base (their damping's coupling between joints explicit).
    model = sprung_baxter()
    q0, qd0, tau = _inputs(model, 3, 20)
    runs = _rollouts(model, q0, qd0, tau, limits=False, **settings)
    difference, sensitivity = _difference(runs)
    assert difference < AGREEMENT_TOL
    assert difference < CHAOS_FACTOR * sensitivity
    band = point_spring_lengths(model, runs[1][0].reshape(-1, model.nq))[:, 0]
    assert bool((band < BAND.rest_length).any()) and bool((band > BAND.rest_length).any())


@pytest.mark.parametrize("substeps", [2, 10])
def test_kernel_matches_torch_through_limit_contacts(substeps):
    # Starts pushed towards the elbow's lower limit: the limit rows engage. Whether a joint
    # touching its limit is "predicted beyond it" in a substep is decided by rounding, so
    # both implementations are only as close as the torch step is to itself one ulp away.
    model = baxter()
    q0, qd0, tau = _inputs(model, 2, 30)
    q0[:, 3] = model.lower[3] + 0.02
    qd0[:, 3] = -2.0
    runs = _rollouts(model, q0, qd0, tau, substeps=substeps, iterations=2)
    assert float(runs[1][0][..., 3].min()) < float(model.lower[3]) + 1e-4  # reached the limit
    difference, sensitivity = _difference(runs)
    assert difference < CHAOS_FACTOR * sensitivity


def test_rollout_dispatch_follows_gradient_needs(monkeypatch):
    model = baxter()
    sim = PBDSimulator(model, substeps=2)
    calls = []
    original = FastPBD.rollout
    monkeypatch.setattr(FastPBD, "rollout", lambda self, *a: calls.append(1) or original(self, *a))
    q0, qd0, tau = _inputs(model, 2, 0)
    with torch.no_grad():
        sim.rollout(q0, qd0, tau[:, :3])
    sim.rollout(q0, qd0, tau[:, :3])  # grad mode on, but nothing requires a gradient
    assert len(calls) == 2
    q, _ = sim.rollout(q0, qd0, tau[:, :3].clone().requires_grad_())
    assert q.requires_grad and len(calls) == 2
    damping = torch.tensor(0.5, dtype=model.dtype, requires_grad=True)
    trained = PBDSimulator(model.with_parameters({"left_e1.damping": damping}), substeps=2)
    q, _ = trained.rollout(q0, qd0, tau[:, :3])
    q.sum().backward()
    assert damping.grad is not None and len(calls) == 2
    with torch.no_grad():  # forward-mode tangents flow even under no_grad
        with fwad.dual_level():
            dual = fwad.make_dual(torch.tensor(0.5, dtype=model.dtype), torch.tensor(1.0, dtype=model.dtype))
            q, _ = PBDSimulator(model.with_parameters({"left_e1.damping": dual}), substeps=2).rollout(q0, qd0, tau[:, :3])
            assert fwad.unpack_dual(q).tangent is not None
        PBDSimulator(model, substeps=2, fast=False).rollout(q0, qd0, tau[:, :3])
    assert len(calls) == 2


def test_batch_shapes_broadcast_like_the_torch_rollout():
    model = baxter()
    q0, qd0, tau = _inputs(model, 3, 0)
    sim, slow = PBDSimulator(model, substeps=2), PBDSimulator(model, substeps=2, fast=False)
    with torch.no_grad():
        for args in ((q0[0], qd0[0], tau[:, :4]), (q0[:, None][:2], qd0[0], tau[:, :4])):
            q, qd = sim.rollout(*args)
            q_ref, qd_ref = slow.rollout(*args)
            assert q.shape == q_ref.shape and qd.shape == qd_ref.shape
            assert float((q - q_ref).abs().max()) < AGREEMENT_TOL
    assert q.dtype == model.dtype


def test_unsupported_setups_fall_back_to_torch():
    model = baxter()
    settings = PBDSimulator(model).settings
    assert fast_rollout_supported(model, settings) is None
    assert "jacobi" in fast_rollout_supported(model, PBDSimulator(model, solver="jacobi").settings)
    assert "float32" in fast_rollout_supported(model.to(dtype=torch.float32), settings)
    assert "free base" in fast_rollout_supported(model, settings, base=FreeBase(mass=1.0))
    prismatic = RobotModel.from_urdf(chain_urdf([0.3, 0.3], [1.0, 1.0], kinds=["revolute", "prismatic"]))
    assert "prismatic" in fast_rollout_supported(prismatic, settings)
    # The fallback still simulates (float32 through torch).
    small = model.to(dtype=torch.float32)
    with torch.no_grad():
        q, _ = PBDSimulator(small, substeps=2).rollout(torch.zeros(small.nq), torch.zeros(small.nq), torch.zeros(2, small.nq))
    assert q.dtype == torch.float32 and bool(torch.isfinite(q).all())


def test_bad_input_is_refused_before_the_kernel():
    model = baxter()
    sim = PBDSimulator(model, substeps=2)
    q0, qd0, tau = _inputs(model, 1, 0)
    tau[0, 2, 4] = float("nan")
    with torch.no_grad(), pytest.raises(RobotModelError, match="left_w0"):
        sim.rollout(q0, qd0, tau)
    with torch.no_grad(), pytest.raises(ValueError, match="tau_seq"):
        sim.rollout(q0[0], qd0[0], torch.zeros(model.nq, dtype=model.dtype))
    with pytest.raises(ValueError, match="expected q0"):
        FastPBD.from_model(model).rollout(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 1, 3)), 0.01, sim.settings)


def test_divergence_and_residuals_are_reported_like_the_torch_step():
    model = baxter()
    tau = torch.zeros(1, 3, model.nq, dtype=model.dtype)
    tau[0, 1, -1] = 1e300  # overflows inside the step
    zero = torch.zeros(1, model.nq, dtype=model.dtype)
    for fast in (True, False):
        with torch.no_grad(), pytest.raises(PBDError, match="diverged"):
            PBDSimulator(model, substeps=2, fast=fast).rollout(zero, zero, tau)
    q, qd = random_state(model, 1, speed=2.0)
    tau = torch.zeros(2, model.nq, dtype=model.dtype)
    # One direct iteration at one substep leaves a residual above this tolerance.
    lax = PBDSimulator(model, substeps=1, iterations=1, limits=False, residual_tolerance=RESIDUAL_TOLERANCE)
    with torch.no_grad(), pytest.warns(PBDConvergenceWarning, match="residual .* at joint"):
        lax.rollout(q, qd, tau)
    strict = PBDSimulator(model, substeps=1, iterations=1, limits=False, residual_tolerance=RESIDUAL_TOLERANCE, on_residual="raise")
    with torch.no_grad(), pytest.raises(PBDError, match="not converged"):
        strict.rollout(q, qd, tau)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", PBDConvergenceWarning)
        PBDSimulator(model, substeps=4).rollout(q, qd, tau)  # converged: silent


def test_kernel_keeps_the_callers_torch_thread_count():
    # numba's OpenMP layer shares the OpenMP runtime with torch and sets its thread count.
    model = baxter()
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.no_grad():
            PBDSimulator(model, substeps=1).rollout(*_inputs(model, 2, 0)[:2], torch.zeros(2, 2, model.nq, dtype=model.dtype))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(previous)

"""Reduced versions of the paper's experiments: static holding torques (Table III) and the
double-pendulum design (Table II). The full ones are in benchmarks/bench_pbd.py.
"""

import sys

import numpy as np
import torch

from diffsim_ros.dynamics import gravity_torques, spring_torques
from diffsim_ros.sim import PBDSimulator
from diffsim_ros.sim.rigid import RigidBodySimulator
from diffsim_ros.sim.pbd import static_torques
from oracles import REPO
from test_pbd_references import baxter, random_state

sys.path.insert(0, str(REPO))  # benchmarks/ holds the design experiment shared with the test

from benchmarks.pbd_design import DesignTask, design_loss  # noqa: E402

STATIC_MAE_TOL = 0.01  # per-joint mean absolute error of holding torques [N·m] (issue target)
STATIC_RESIDUAL_TOL = 1e-6  # acceleration left after the Newton iterations [rad/s²]
RIGID_AGREEMENT_TOL = 1e-6  # PBD vs rigid-body holding torques [N·m]
DESIGN_GRAD_RTOL = 1e-5  # design gradient vs central differences
DESIGN_FD_STEP = 1e-5  # [m]
POSES = 6


def _poses(model):
    return torch.stack([random_state(model, 100 + k, spread=1.4)[0] for k in range(POSES)])


def test_pbd_static_torques_equal_gravity_minus_spring_torques():
    model = baxter()
    q = _poses(model)
    tau, residual = static_torques(PBDSimulator(model), q)
    analytic = gravity_torques(model, q) - spring_torques(model, q)
    mae = (tau - analytic).abs().mean(0)
    assert float(mae.max()) < STATIC_MAE_TOL
    assert float(residual.max()) < STATIC_RESIDUAL_TOL


def test_static_torques_work_through_any_simulator():
    model = baxter()
    q = _poses(model)[:3]
    pbd, _ = static_torques(PBDSimulator(model), q)
    rigid, _ = static_torques(RigidBodySimulator(model, 0.01), q)
    assert float((pbd - rigid).abs().max()) < RIGID_AGREEMENT_TOL


def test_design_gradient_matches_finite_differences_and_descends():
    task = DesignTask(steps=15, substeps=4)
    lengths = torch.tensor([3.0, 0.1], dtype=torch.float64, requires_grad=True)
    loss, _, _ = design_loss(lengths, task)
    loss.backward()
    rng = np.random.default_rng(0)
    direction = torch.as_tensor(rng.normal(size=2), dtype=torch.float64)
    with torch.no_grad():
        plus = design_loss(lengths + DESIGN_FD_STEP * direction, task)[0]
        minus = design_loss(lengths - DESIGN_FD_STEP * direction, task)[0]
    numeric = float(plus - minus) / (2 * DESIGN_FD_STEP)
    analytic = float(lengths.grad @ direction)
    assert abs(analytic - numeric) <= DESIGN_GRAD_RTOL * abs(numeric)
    with torch.no_grad():
        stepped = design_loss(lengths - 1e-3 * lengths.grad / lengths.grad.norm(), task)[0]
    assert float(stepped) < float(loss.detach())

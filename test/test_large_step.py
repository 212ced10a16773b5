"""The large-step SDIRK integrator: bounded, dissipative and second-order accurate at dt = 0.05-0.1 s on Baxter.

Scenario: Baxter's left arm (its lever spring, joint damping, plus smoothed Coulomb friction)
released with zero motor torque 0.3 rad away from its hanging equilibrium, for 5 s. The
reference is the compiled implicit-Euler rigid step at dt = 1e-4 s (first order: about 5e-4
rad from the exact solution here), independent of the integrator under test.
"""

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim.large_step import SDIRKStep
from diffsim_ros.sim.rigid_fast import FastRigidStep
from oracles import BAXTER_LEFT

SECONDS = 5.0
REFERENCE_DT = 1e-4  # [s]
ERROR_TOL_AT_01 = 0.03  # [rad] joint error after 5 s at dt = 0.1 s (measured 0.019)
ORDER_RATIO = 3.0  # halving dt must cut the error by more than this (second order: 4)
CONSISTENCY_TOL = 2e-3  # [rad] at dt = 0.01 s: the reference's own error dominates
ENERGY_RISE_TOL = 1e-6  # [J] a passive, damped arm never gains energy over a step
FRICTION = 0.2  # [N·m]
# hanging equilibrium of the arm (found by a long damped simulation, angles wrapped)
Q_EQ = np.array([-0.0036, 2.5808, -3.1440, 0.9972, 0.0593, -0.0612, -0.0112])
Q0 = Q_EQ + 0.3


@pytest.fixture(scope="module")
def model():
    base = load_robot_config(BAXTER_LEFT).build_model()
    return base.with_parameters({f"{j}.friction": FRICTION for j in base.joint_names})


@pytest.fixture(scope="module")
def reference(model):
    step = FastRigidStep(model, REFERENCE_DT, parameters=())
    q, qd, zero = Q0.copy(), np.zeros(7), np.zeros(7)
    for _ in range(int(round(SECONDS / REFERENCE_DT))):
        q, qd = step.step(q, qd, zero)
    return q


def _final_error(model, reference, dt):
    qs, vs = SDIRKStep(model, dt).rollout(Q0, np.zeros(7), np.zeros((int(round(SECONDS / dt)), 7)))
    assert np.all(np.isfinite(qs)) and np.all(np.isfinite(vs))
    return float(np.abs(qs[-1] - reference).max()), qs, vs


def test_large_steps_are_bounded_and_second_order(model, reference):
    error_01, _, vs = _final_error(model, reference, 0.1)
    error_005, _, _ = _final_error(model, reference, 0.05)
    assert error_01 < ERROR_TOL_AT_01
    assert error_005 < error_01 / ORDER_RATIO
    assert np.abs(vs).max() < 5.0  # [rad/s] no blow-up: the release never exceeds ~3 rad/s
    error_001, _, _ = _final_error(model, reference, 0.01)
    assert error_001 < CONSISTENCY_TOL


def test_a_passive_damped_arm_loses_energy_at_dt_01(model):
    qs, vs = SDIRKStep(model, 0.1).rollout(Q0, np.zeros(7), np.zeros((50, 7)))
    q = torch.as_tensor(np.vstack([Q0, qs]))
    qd = torch.as_tensor(np.vstack([np.zeros(7), vs]))
    energy = (dyn.kinetic_energy(model, q, qd) + dyn.potential_energy(model, q) + dyn.spring_potential_energy(model, q)).numpy()
    assert np.all(np.diff(energy) < ENERGY_RISE_TOL)
    assert energy[-1] < energy[0] - 1.0  # [J] most of the release energy is dissipated


def test_step_rollout_and_bad_input(model):
    integrator = SDIRKStep(model, 0.1)
    tau = np.full(7, 0.5)
    q1, v1 = integrator.step(Q0, np.zeros(7), tau)
    qs, vs = integrator.rollout(Q0, np.zeros(7), tau[None])
    np.testing.assert_array_equal(q1, qs[0])
    np.testing.assert_array_equal(v1, vs[0])
    with pytest.raises(ValueError, match=r"torques must have shape \(T, 7\)"):
        integrator.rollout(Q0, np.zeros(7), np.zeros(7))
    with pytest.raises(ValueError, match=r"q must have shape \(7,\)"):
        integrator.step(Q0[:3], np.zeros(7), tau)
    with pytest.raises(ValueError, match="dt must be positive"):
        SDIRKStep(model, 0.0)
    with pytest.raises(ArithmeticError, match=r"SDIRK step 0 \(t = 0 s\) failed: no convergence in 1 Newton"):
        SDIRKStep(model, 0.1, max_newton=1).step(Q0, np.zeros(7), tau)

"""PBD physics against independent references: MuJoCo and the exact rigid-body integrator.

Reduced versions of the fidelity study (benchmarks/bench_pbd.py writes the full tables).
"""

import dataclasses

import numpy as np
import pytest
import torch

from diffsim_ros.dynamics import (
    body_placements,
    forward_dynamics,
    frame_jacobian,
    gravity_torques,
    kinetic_energy,
    potential_energy,
)
from diffsim_ros.dynamics.spatial import skew
from diffsim_ros.model import RobotModel
from diffsim_ros.dynamics.spatial import quat_to_matrix
from diffsim_ros.sim import PBDControl, PBDConvergenceWarning, PBDSimulator
from diffsim_ros.sim.pbd import FreeBase, PBDError, build_system
from diffsim_ros.sim.pbd.constraints import joint_blocks
from diffsim_ros.sim.pbd.projection import solve_direct
from diffsim_ros.sim.pbd.solver import SolverSettings, _accelerate, _pose
from diffsim_ros.sim.rigid import RigidBodySimulator
from test_pbd_references import baxter, chain_urdf, mujoco_rollout, random_state

BAXTER_RMSE_TOL = 1e-4  # joint-angle RMSE over 0.3 s, 10 substeps, vs MuJoCo [rad]
BAXTER_MAX_TOL = 3e-4  # worst joint-angle error over 0.3 s [rad]
BAXTER_QD_TOL = 5e-3  # worst joint-velocity error over 0.3 s [rad/s]
SECOND_ORDER_RATIO = 3.0  # error(h) / error(h/2) of a second-order scheme is ~4
ENERGY_DRIFT_TOL = 1e-3  # relative energy change of an undamped pendulum over 2 s
CHAIN_TOL = 1e-4  # small chains vs RK4 reference [rad or m]
SOLVER_AGREEMENT_TOL = 1e-8  # converged Gauss-Seidel/Jacobi vs direct [rad]
BATCH_TOL = 1e-10  # batched vs one-by-one rollouts (batched and single LAPACK kernels round differently)
LIMIT_TOL = 2e-3  # penetration of a joint limit under a large torque [rad]
WRENCH_TOL = 1e-6  # tip force as wrench vs as Jacobian-transpose torques [rad]
MOMENTUM_TOL = 1e-10  # linear momentum of a free-floating chain under internal torques [kg·m/s]
ANGULAR_MOMENTUM_TOL = 1e-5  # its angular momentum over 0.5 s (second-order drift) [kg·m²/s]
FREE_FALL_TOL = 1e-10  # COM of a free-floating chain under gravity vs free fall [m]
CHAIN_SOLVE_RTOL = 1e-9  # chain elimination vs dense LU of the same system (relative)
FLOAT32_TOL = 2e-3  # float32 model vs float64 over 0.2 s [rad]
DRIVE_TOL = 1e-3  # implicit joint drive (4 substeps) vs the continuous PD loop by RK4 [rad]
DRIVE_BALANCE_TOL = 1e-2  # a settled stiff drive balances gravity: |K (target - q) - g(q)| [N·m]

DT = 0.01


def _sine_torques(model, steps, amplitude=3.0):
    t = torch.arange(steps, dtype=model.dtype)[:, None] * DT
    phase = torch.arange(model.nq, dtype=model.dtype)
    scale = torch.tensor([1, 1, 1, 1, 0.3, 0.3, 0.1], dtype=model.dtype)[: model.nq]
    return amplitude * scale * torch.sin(2 * np.pi * 1.5 * t + phase)


@pytest.mark.parametrize("torques", ["free", "sine"])
def test_baxter_matches_mujoco(torques):
    """Swinging under gravity (damping, shoulder spring) and under a torque sequence."""
    model = baxter()
    q0, qd0 = random_state(model, 3)
    steps = 30
    tau = torch.zeros(steps, model.nq, dtype=model.dtype) if torques == "free" else _sine_torques(model, steps)
    ref_q, ref_qd = mujoco_rollout(model, q0.numpy(), qd0.numpy(), tau.numpy(), DT)
    with torch.no_grad():
        q, qd = PBDSimulator(model, dt=DT, substeps=10, limits=False).rollout(q0, qd0, tau)
    error = q.numpy() - ref_q
    assert np.sqrt((error**2).mean()) < BAXTER_RMSE_TOL
    assert np.abs(error).max() < BAXTER_MAX_TOL
    assert np.abs(qd.numpy() - ref_qd).max() < BAXTER_QD_TOL


def _double_pendulum(**kwargs):
    return RobotModel.from_urdf(chain_urdf([0.5, 0.4], [1.0, 0.7]), **kwargs)


def _rk4_reference(model, q0, qd0, tau, substeps=50):
    with torch.no_grad():
        return RigidBodySimulator(model, DT, substeps=substeps, integrator="rk4").rollout(q0, qd0, tau)


def test_second_order_convergence():
    model = _double_pendulum()
    q0 = torch.tensor([0.8, -0.5], dtype=model.dtype)
    qd0 = torch.tensor([1.0, 2.0], dtype=model.dtype)
    tau = torch.zeros(20, 2, dtype=model.dtype)
    ref, _ = _rk4_reference(model, q0, qd0, tau)
    errors = []
    for substeps in (2, 4):
        with torch.no_grad():
            q, _ = PBDSimulator(model, dt=DT, substeps=substeps, limits=False).rollout(q0, qd0, tau)
        errors.append(float((q - ref).abs().max()))
    assert errors[0] / errors[1] > SECOND_ORDER_RATIO


def test_energy_drift_is_bounded():
    """Undamped, unforced double pendulum over 2 s: no secular energy loss or gain."""
    model = _double_pendulum()
    q0 = torch.tensor([1.2, -0.4], dtype=model.dtype)
    qd0 = torch.zeros(2, dtype=model.dtype)
    with torch.no_grad():
        q, qd = PBDSimulator(model, dt=DT, substeps=10, limits=False).rollout(q0, qd0, torch.zeros(200, 2, dtype=model.dtype))
    energy = kinetic_energy(model, q, qd) + potential_energy(model, q)
    initial = kinetic_energy(model, q0, qd0) + potential_energy(model, q0)
    hanging = torch.tensor([np.pi / 2, 0.0], dtype=model.dtype)  # the links point down
    scale = float(initial - potential_energy(model, hanging))  # the energy that swings
    assert float((energy - initial).abs().max()) / scale < ENERGY_DRIFT_TOL


def test_prismatic_and_friction_chain_matches_rk4():
    """A revolute-prismatic-revolute chain with damping and smoothed Coulomb friction."""
    model = RobotModel.from_urdf(
        chain_urdf([0.4, 0.3, 0.3], [1.0, 0.5, 0.4], axes=[(0, 1, 0), (1, 0, 0), (0, 0, 1)], kinds=["revolute", "prismatic", "revolute"])
    )
    model = model.with_parameters({"j1.damping": 0.2, "j2.damping": 0.5, "j3.friction": 0.02})
    q0 = torch.tensor([0.3, 0.05, 0.2], dtype=model.dtype)
    qd0 = torch.tensor([0.5, -0.2, 1.0], dtype=model.dtype)
    tau = torch.zeros(15, 3, dtype=model.dtype)
    tau[:, 1] = 2.0
    ref, _ = _rk4_reference(model, q0, qd0, tau, substeps=40)
    with torch.no_grad():
        q, _ = PBDSimulator(model, dt=DT, substeps=10, limits=False).rollout(q0, qd0, tau)
    assert float((q - ref).abs().max()) < CHAIN_TOL


def test_payload_matches_rk4():
    model = baxter().with_payload(1.5, (0.0, 0.02, 0.05))
    q0, qd0 = random_state(model, 5)
    tau = torch.zeros(10, model.nq, dtype=model.dtype)
    ref, _ = _rk4_reference(model, q0, qd0, tau, substeps=10)
    with torch.no_grad():
        q, _ = PBDSimulator(model, dt=DT, substeps=10, limits=False).rollout(q0, qd0, tau)
    assert float((q - ref).abs().max()) < BAXTER_MAX_TOL


@pytest.mark.parametrize("solver, iterations", [("gauss_seidel", 200), ("jacobi", 2000)])
def test_iterative_solvers_converge_to_the_direct_solution(solver, iterations):
    model = _double_pendulum()
    q0 = torch.tensor([0.8, -0.5], dtype=model.dtype)
    qd0 = torch.tensor([1.0, 2.0], dtype=model.dtype)
    tau = torch.zeros(2, dtype=model.dtype)
    with torch.no_grad():
        direct = PBDSimulator(model, dt=DT, substeps=1, iterations=10, limits=False).joint_step(q0, qd0, tau)
        other = PBDSimulator(model, dt=DT, substeps=1, iterations=iterations, solver=solver, limits=False).joint_step(q0, qd0, tau)
    for a, b in zip(direct, other):
        assert float((a - b).abs().max()) < SOLVER_AGREEMENT_TOL


def test_batched_rollout_equals_single_rollouts():
    model = baxter()
    starts = [random_state(model, seed) for seed in range(3)]
    q0 = torch.stack([s[0] for s in starts])
    qd0 = torch.stack([s[1] for s in starts])
    tau = _sine_torques(model, 4).expand(3, 4, model.nq)
    sim = PBDSimulator(model, dt=DT, substeps=3)
    with torch.no_grad():
        q, qd = sim.rollout(q0, qd0, tau)
        for k in range(3):
            qk, qdk = sim.rollout(q0[k], qd0[k], tau[k])
            assert float((q[k] - qk).abs().max()) < BATCH_TOL
            assert float((qd[k] - qdk).abs().max()) < BATCH_TOL


def test_dtype_follows_the_model():
    model = baxter()
    q0, qd0 = random_state(model, 0)
    tau = torch.zeros(20, model.nq, dtype=model.dtype)
    single = model.to(dtype=torch.float32)
    with torch.no_grad():
        reference, _ = PBDSimulator(model).rollout(q0, qd0, tau)
        q, qd = PBDSimulator(single, residual_tolerance=1e-2).rollout(q0.float(), qd0.float(), tau.float())
    assert q.dtype == qd.dtype == torch.float32
    assert float((q.double() - reference).abs().max()) < FLOAT32_TOL


def test_joint_limit_holds_under_a_large_torque():
    model = baxter()
    elbow = model.joint_index("left_e1")  # lower limit -0.05 rad
    q0 = torch.zeros(model.nq, dtype=model.dtype)
    q0[elbow] = 0.1
    tau = torch.zeros(30, model.nq, dtype=model.dtype)
    tau[:, elbow] = -20.0
    with torch.no_grad():  # on_residual="raise": the limit rows keep the joint rows converged
        limited, _ = PBDSimulator(model, dt=DT, substeps=10, on_residual="raise").rollout(q0, torch.zeros_like(q0), tau)
        free, _ = PBDSimulator(model, dt=DT, substeps=10, limits=False).rollout(q0, torch.zeros_like(q0), tau)
    lower = float(model.lower[elbow])
    assert float(free[-1, elbow]) < lower - 0.1  # it would pass the limit
    assert float(limited[:, elbow].min()) > lower - LIMIT_TOL


def test_external_wrench_equals_jacobian_transpose_torques():
    """A force at the hand COM as a particle wrench = the same force as joint torques J^T F.

    Over one short step: J^T F is held constant while the wrench's world force is, which
    differ only to second order in the motion of the arm.
    """
    model = baxter()
    q0, qd0 = random_state(model, 7)
    force = torch.tensor([5.0, -3.0, 8.0], dtype=model.dtype)
    sim = PBDSimulator(model, dt=0.002, substeps=4, limits=False)
    start = sim.initial_state(q0, qd0)
    wrench = torch.zeros(model.nq, 6, dtype=model.dtype)
    wrench[-1, 3:] = force
    state = sim.step(start, PBDControl(tau=torch.zeros(model.nq, dtype=model.dtype), wrench=wrench))
    q_wrench, _ = sim.joint_state(state)
    jac = frame_jacobian(model, q0, model.body_names[-1])  # at the body-frame origin
    offset = start.pos[-1] - body_placements(model, q0)[1][-1]  # origin -> COM
    com_jacobian = jac[:3] - skew(offset) @ jac[3:]
    q_tau, _ = sim.joint_step(q0, qd0, com_jacobian.T @ force)
    assert float((q_wrench - q_tau).abs().max()) < WRENCH_TOL


def _pd_reference(model, q0, target, stiffness, damping, steps, h=2e-4):
    """The continuous PD loop ``K (target - q) - D qd`` integrated by RK4 (every DT)."""
    q, qd, out = q0.clone(), torch.zeros_like(q0), []

    def accel(q, qd):
        return forward_dynamics(model, q, qd, stiffness * (target - q) - damping * qd, passive=True)

    for i in range(steps * int(round(DT / h))):
        k1v, k1a = qd, accel(q, qd)
        k2v, k2a = qd + 0.5 * h * k1a, accel(q + 0.5 * h * k1v, qd + 0.5 * h * k1a)
        k3v, k3a = qd + 0.5 * h * k2a, accel(q + 0.5 * h * k2v, qd + 0.5 * h * k2a)
        k4v, k4a = qd + h * k3a, accel(q + h * k3v, qd + h * k3a)
        q = q + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        qd = qd + h / 6 * (k1a + 2 * k2a + 2 * k3a + k4a)
        if (i + 1) % int(round(DT / h)) == 0:
            out.append(q)
    return torch.stack(out)


def _drive_rollout(model, q0, target, stiffness, damping, steps, substeps):
    sim = PBDSimulator(model, dt=DT, substeps=substeps, limits=False)
    control = PBDControl(tau=torch.zeros_like(q0), target=target, stiffness=stiffness, drive_damping=damping)
    q, qd, out = q0, torch.zeros_like(q0), []
    with torch.no_grad():
        for _ in range(steps):
            q, qd = sim.joint_step(q, qd, control)
            out.append(q)
    return torch.stack(out)


def test_implicit_joint_drive_is_the_pd_loop_to_second_order():
    model = _double_pendulum()
    q0 = torch.zeros(2, dtype=model.dtype)
    target = torch.tensor([0.3, -0.5], dtype=model.dtype)
    gains = torch.tensor([60.0, 20.0], dtype=model.dtype), torch.tensor([6.0, 1.0], dtype=model.dtype)
    ref = _pd_reference(model, q0, target, *gains, steps=20)
    errors = [float((_drive_rollout(model, q0, target, *gains, 20, s) - ref).abs().max()) for s in (2, 4)]
    assert errors[1] < DRIVE_TOL
    assert errors[0] / errors[1] > SECOND_ORDER_RATIO


def test_stiff_damped_drive_on_a_light_link_is_stable():
    """Gains a torque held over 10 ms could not stabilize (K h^2 / I >> 1) settle implicitly."""
    model = RobotModel.from_urdf(chain_urdf([0.5, 0.3], [1.0, 0.3]))
    target = torch.tensor([0.3, -0.5], dtype=model.dtype)
    gains = torch.tensor([1e5, 1e5], dtype=model.dtype), torch.tensor([200.0, 60.0], dtype=model.dtype)
    with pytest.warns(PBDConvergenceWarning):  # the first, violent transient is flagged
        q = _drive_rollout(model, torch.zeros(2, dtype=model.dtype), target, *gains, steps=100, substeps=2)
    assert bool(torch.isfinite(q).all())
    balance = gains[0] * (target - q[-1]) - gravity_torques(model, q[-1])
    assert float(balance.abs().max()) < DRIVE_BALANCE_TOL


def _momenta(system, state):
    """Total linear [kg·m/s] and angular momentum about the world origin [kg·m²/s] of the particles."""
    mass = system.bodies.dynamic / system.bodies.inv_mass.clamp_min(1e-300)
    rot = quat_to_matrix(state.quat)
    spin = (rot @ system.bodies.inertia @ rot.transpose(-1, -2) @ state.omega[..., None])[..., 0]
    linear = mass[:, None] * state.vel
    return linear.sum(-2), (torch.cross(state.pos, linear, dim=-1) + spin).sum(-2)


def test_free_base_conserves_momentum_and_falls_freely():
    model = RobotModel.from_urdf(chain_urdf([0.5, 0.3], [1.0, 0.4], axes=[(0, 1, 0), (0, 0, 1)]))
    base = FreeBase(mass=2.0, com=(0.05, 0.0, 0.0), inertia=(0.02, 0.0, 0.0, 0.03, 0.0, 0.04))
    q = torch.tensor([0.4, -0.3], dtype=model.dtype)
    qd = torch.tensor([1.0, 2.0], dtype=model.dtype)
    twist = (torch.tensor([0.1, 0.0, 0.2], dtype=model.dtype), torch.tensor([0.0, 0.3, 0.1], dtype=model.dtype))
    tau = torch.tensor([0.5, -0.2], dtype=model.dtype)
    weightless = model.replace(gravity=torch.zeros(3, dtype=model.dtype))
    for gravity_model, steps in ((weightless, 50), (model, 30)):
        sim = PBDSimulator(gravity_model, base=base, limits=False)
        system = build_system(gravity_model, base)
        state = start = sim.initial_state(q, qd, base_twist=twist)
        for _ in range(steps):
            state = sim.step(state, tau)
        (p0, l0), (p1, l1) = _momenta(system, start), _momenta(system, state)
        masses = 1.0 / system.bodies.inv_mass  # all particles move
        fall = p0 / masses.sum() * steps * DT + 0.5 * gravity_model.gravity * (steps * DT) ** 2
        com_shift = (masses[:, None] * (state.pos - start.pos)).sum(0) / masses.sum()
        assert float((com_shift - fall).abs().max()) < FREE_FALL_TOL
        if gravity_model is weightless:
            assert float((p1 - p0).abs().max()) < MOMENTUM_TOL
            assert float((l1 - l0).abs().max()) < ANGULAR_MOMENTUM_TOL
    with pytest.raises(PBDError, match="free-base"):
        sim.joint_step(q, qd, tau)


def _tree_urdf():
    """A body carrying two branches (siblings couple through their common parent)."""
    inertial = '<inertial><origin xyz="0.15 0 0"/><mass value="{m}"/><inertia ixx="0.002" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial>'
    links = ['<link name="base"/>'] + [f'<link name="{n}">{inertial.format(m=m)}</link>' for n, m in (("a", 1.0), ("b", 0.5), ("c", 0.3))]
    joints = [
        ("ja", "base", "a", "0 0 0", "0 1 0"),
        ("jb", "a", "b", "0.3 0 0", "0 1 0"),
        ("jc", "a", "c", "0.3 0 0", "0 0 1"),
    ]
    joints = [
        f'<joint name="{n}" type="revolute"><parent link="{p}"/><child link="{c}"/><origin xyz="{o}"/>'
        f'<axis xyz="{a}"/><limit lower="-10" upper="10" effort="10" velocity="10"/></joint>'
        for n, p, c, o, a in joints
    ]
    return '<robot name="tree">' + "".join(links) + "".join(joints) + "</robot>"


def test_branched_tree_matches_rk4():
    """The dense direct solve (trees) with sibling couplings against exact integration."""
    model = RobotModel.from_urdf(_tree_urdf())
    q0 = torch.tensor([0.4, -0.3, 0.5], dtype=model.dtype)
    qd0 = torch.tensor([0.5, 1.0, -1.0], dtype=model.dtype)
    tau = torch.zeros(15, 3, dtype=model.dtype)
    ref, _ = _rk4_reference(model, q0, qd0, tau, substeps=40)
    with torch.no_grad():
        q, _ = PBDSimulator(model, dt=DT, substeps=10, limits=False).rollout(q0, qd0, tau)
    assert float((q - ref).abs().max()) < CHAIN_TOL


def test_chain_elimination_equals_the_dense_solve():
    """Block-tridiagonal elimination (serial chains) = dense LU of the same joint system."""
    model = baxter()
    sim = PBDSimulator(model)
    q, qd = random_state(model, 4)
    state = sim.initial_state(q, qd)
    system = build_system(model)
    control = PBDControl(tau=torch.zeros(model.nq, dtype=model.dtype))
    pose = _pose(model, system, state, control, SolverSettings())
    _, _, inv_inertia, damping, rate, _ = _accelerate(model, system, state, pose, control, 1e-3, "start", state.omega)
    blocks = joint_blocks(system, pose.frames, pose.rot, inv_inertia, damping, rate, 0.0, 1e-3)
    rhs = torch.as_tensor(np.random.default_rng(0).normal(size=(model.nq, 6)), dtype=model.dtype)
    chain = solve_direct(system, blocks, rhs)
    dense = solve_direct(dataclasses.replace(system, fixed_base=False), blocks, rhs)  # base mass is 0: same system
    for a, b in zip(chain, dense):
        assert float((a - b).abs().max()) < CHAIN_SOLVE_RTOL * float(b.abs().max())

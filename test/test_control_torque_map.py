"""Torque lookup maps: direct optimization, conditioning, interpolation, files, CLI."""

import dataclasses

import numpy as np
import pytest
import torch
import yaml

from diffsim_ros.cli import main as cli_main
from diffsim_ros.control import (
    TorqueMap,
    TorqueMapError,
    TorqueMapGrid,
    build_torque_map,
    parameter_hash,
    solve_one_step_torques,
    validate_torque_map,
)
from diffsim_ros.sim import make_simulator
from diffsim_ros.control.torque_map import rebuild_torque_map, simulator_settings
from diffsim_ros.control.jacobians import rowwise_jacobian
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.model import load_robot_config
from oracles import BAXTER_LEFT

GOAL_TOL = 1e-9  # [rad] one-step goal reached by the direct optimization
JAC_FD_TOL = 1e-6  # relative, central differences of the rollout Jacobian
LOOKUP_TOL = 1e-9  # [N·m] interpolation of data that is affine in every key
# Conditioned map vs direct optimization at off-grid keys and configurations [N·m]
# (measured: s1 ~0.05 max with 2-5 substeps, ~1e-13 with the default single step).
CONDITIONED_MAX_ERR = 0.1
CONDITIONED_PAYLOAD_TOL = 1e-6  # [N·m] one-substep rigid map served to a model with another payload
UNCONDITIONED_MIN_ERR = 10.0  # the paper's single-configuration map misses s0's inertia change by more
SMALL_GRID = TorqueMapGrid(angle_points=5, velocity_points=5, inertia_contexts=4, context_pool=128)


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model()


@pytest.fixture(scope="module")
def built(model):
    simulator = make_simulator(model, SMALL_GRID.dt, kind="rigid")
    return simulator, build_torque_map(simulator, SMALL_GRID)


def test_rollout_jacobian_matches_finite_differences(model):
    simulator = make_simulator(model, 0.01, kind="rigid")
    q = torch.tensor([0.1, -0.4, 0.2, 0.9, -0.1, 0.7, 0.3], dtype=torch.float64)
    qd = torch.linspace(-0.3, 0.3, 7, dtype=torch.float64)

    def two_steps(tau):
        q1, qd1 = simulator.joint_step(q, qd, tau)
        return torch.cat([simulator.joint_step(q1, qd1, 0.5 * tau)[0], qd1], dim=-1)

    tau = torch.linspace(-5.0, 5.0, 7, dtype=torch.float64)
    value, jac = rowwise_jacobian(two_steps, tau, 14)
    torch.testing.assert_close(value, two_steps(tau))
    for i in range(7):
        step = torch.zeros(7, dtype=torch.float64)
        step[i] = 1e-4
        fd = (two_steps(tau + step) - two_steps(tau - step)) / 2e-4
        torch.testing.assert_close(jac[:, i], fd, atol=JAC_FD_TOL * fd.abs().max().item(), rtol=0)


def test_direct_optimization_reaches_the_goal_with_substeps(model):
    simulator = make_simulator(model, 0.01, substeps=4, kind="rigid")  # not affine in tau: Newton iterates
    q = torch.tensor([[0.1, -0.4, 0.2, 0.9, -0.1, 0.7, 0.3]], dtype=torch.float64)
    qd = torch.tensor([[0.4, -0.2, 0.0, 0.1, 0.0, 0.0, 0.3]], dtype=torch.float64)
    goal = q + torch.tensor([0.005, 0.0, -0.003, 0.0, 0.002, 0.0, 0.0], dtype=torch.float64)
    tau, residual = solve_one_step_torques(simulator, q, qd, goal, torch.zeros_like(q))
    assert residual.abs().max() < GOAL_TOL
    with torch.no_grad():
        assert (simulator.joint_step(q, qd, tau)[0] - goal).abs().max() < GOAL_TOL
    # Chord iterations with a Jacobian from another state (as the map builder uses) agree.
    _, jac = rowwise_jacobian(lambda t: simulator.joint_step(q.unsqueeze(-2), 0 * qd.unsqueeze(-2), t)[0], torch.zeros_like(q), 7)
    chord, residual = solve_one_step_torques(simulator, q, qd, goal, torch.zeros_like(q), iterations=12, jacobian=jac)
    assert residual.abs().max() < GOAL_TOL
    torch.testing.assert_close(chord, tau, atol=1e-6, rtol=0)


def test_conditioning_on_inertia_is_needed_and_accurate(model):
    """Off-grid validation (the issue's check), for the conditioned and the paper's map."""
    simulator = make_simulator(model, 0.01, substeps=2, kind="rigid")  # not affine in tau: a real optimization
    fast = FastDynamics.from_model(model)
    grid = dataclasses.replace(SMALL_GRID, inertia_contexts=5, newton_iterations=4, tolerance=1e-9)
    conditioned = validate_torque_map(build_torque_map(simulator, grid), simulator, fast, samples=4)
    assert conditioned["max"].max() < CONDITIONED_MAX_ERR
    single = build_torque_map(simulator, dataclasses.replace(grid, inertia_contexts=1))
    unconditioned = validate_torque_map(single, simulator, fast, samples=4)
    assert unconditioned["max"][0] > UNCONDITIONED_MIN_ERR


def test_lookup_interpolates_and_clamps(built):
    _, tmap = built
    grid = tmap.grid
    angles, velocities = tmap.angle_axis, tmap.velocity_axis
    # Replace the data by a function affine in each key: trilinear interpolation is exact.
    a, v = np.meshgrid(angles, velocities, indexing="ij")
    residual = np.stack([np.stack([m * (3.0 * a + v) + 0.2 * v + j for m in tmap.inertia_axis[j]]) for j in range(7)])
    synthetic = dataclasses.replace(tmap, residual=residual)
    rng = np.random.default_rng(0)
    for _ in range(20):
        da = rng.uniform(-grid.max_angle_step, grid.max_angle_step, 7)
        om = rng.uniform(-grid.max_velocity, grid.max_velocity, 7)
        m = rng.uniform(tmap.inertia_axis[:, 0], tmap.inertia_axis[:, -1])
        expected = m * (3.0 * da + om) + 0.2 * om + np.arange(7)
        np.testing.assert_allclose(synthetic.lookup(da, om, m), expected, atol=LOOKUP_TOL, rtol=0)
    # Keys beyond the grid are clamped to its edges.
    m = tmap.inertia_axis[:, 1]
    far = synthetic.lookup(np.full(7, 1.0), np.full(7, -9.0), m)
    edge = synthetic.lookup(np.full(7, grid.max_angle_step), np.full(7, -grid.max_velocity), m)
    np.testing.assert_allclose(far, edge, atol=LOOKUP_TOL)
    # The grid nodes return the stored values.
    np.testing.assert_allclose(
        tmap.lookup(np.full(7, angles[1]), np.full(7, velocities[3]), tmap.inertia_axis[:, 2]),
        tmap.residual[:, 2, 1, 3],
        atol=LOOKUP_TOL,
    )


def test_save_load_and_refuse_other_models(built, model, tmp_path):
    _, tmap = built
    path = tmp_path / "map.npz"
    tmap.save(path)
    loaded = TorqueMap.load(path, model)
    np.testing.assert_array_equal(loaded.residual, tmap.residual)
    assert loaded.grid == tmap.grid and loaded.parameter_hash == parameter_hash(model)
    assert [p.name for p in tmp_path.iterdir()] == ["map.npz"]  # no temporary files left
    assert loaded.check_model(model) is True  # exact
    calibrated = model.with_payload(0.5)
    assert TorqueMap.load(path, calibrated).check_model(calibrated) is False  # same structure: conditioned
    right = load_robot_config(BAXTER_LEFT.parent / "baxter_right.yaml").build_model()
    with pytest.raises(TorqueMapError, match="joints"):
        loaded.check_model(right)
    version1 = dataclasses.replace(loaded, structure_hash="")  # files written before structure hashes
    assert version1.check_model(model) is True
    with pytest.raises(TorqueMapError, match="version-1 map serves only its exact model"):
        version1.check_model(calibrated)
    with pytest.raises(TorqueMapError, match="not found"):
        TorqueMap.load(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(TorqueMapError, match="not a diffsim_ros torque map"):
        TorqueMap.load(tmp_path / "bad.npz")
    with pytest.raises(TorqueMapError, match="dt"):
        build_torque_map(make_simulator(model, 0.005, kind="rigid"), SMALL_GRID)


def test_map_torques_reach_the_goal_in_the_simulator(built, model):
    """The map's whole torque (holding + lookup) moves a single joint onto its goal."""
    simulator, tmap = built
    fast = FastDynamics.from_model(model)
    q = tmap.contexts[1, 2].copy()
    qd = np.zeros(7)
    qd[1] = 0.25
    goal = q.copy()
    goal[1] += tmap.angle_axis[3]
    tau = tmap.torques(fast, q, qd, goal)
    exact, _ = solve_one_step_torques(simulator, torch.tensor(q)[None], torch.tensor(qd)[None], torch.tensor(goal)[None], torch.zeros(1, 7, dtype=torch.float64))
    np.testing.assert_allclose(tau[1], exact[0, 1].item(), atol=1e-8)


def test_cli_build_and_show(model, tmp_path, capsys):
    calibration = tmp_path / "calibration.yaml"
    calibration.write_text(yaml.safe_dump({"robot": "baxter_left", "parameters": {"payload.mass": 0.8, "camera.pose": [0, 0, 0, 0, 0, 0, 1]}}))
    out = tmp_path / "map.npz"
    args = ["torque-map", "build", "--config", str(BAXTER_LEFT), "--calibration", str(calibration), "--out", str(out)]
    small = ["--angle-points", "3", "--velocity-points", "3", "--contexts", "2", "--validate", "2"]
    assert cli_main(args + small) == 0  # through the PBD simulator (the default)
    printed = capsys.readouterr().out
    assert "validation against direct optimization" in printed
    rows = [line.split() for line in printed.splitlines() if line.strip().startswith("left_")]
    assert len(rows) == 7 and max(float(row[2]) for row in rows) < CONDITIONED_MAX_ERR  # max error column
    tmap = TorqueMap.load(out, model.with_payload(0.8))
    assert tmap.grid.angle_points == 3 and tmap.simulator.startswith("PBDSimulator")
    assert tmap.max_goal_residual < GOAL_TOL
    assert cli_main(args + small) == 2  # exists, no --force
    assert "exists; use --force" in capsys.readouterr().err
    assert cli_main(["torque-map", "show", str(out), "--png", str(tmp_path / "heat.png")]) == 0
    assert (tmp_path / "heat.png").stat().st_size > 10_000
    before = out.read_bytes()
    for png in (out, tmp_path / "notes.txt"):  # an image over the map, or over any non-image file, is refused
        assert cli_main(["torque-map", "show", str(out), "--png", str(png)]) == 2
        assert ".png" in capsys.readouterr().err
    assert out.read_bytes() == before and not (tmp_path / "notes.txt").exists()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(before[: len(before) // 2])
    assert cli_main(["torque-map", "show", str(truncated)]) == 2
    assert "not a complete .npz archive" in capsys.readouterr().err
    assert cli_main(["torque-map", "show", str(out), "--config", str(BAXTER_LEFT)]) == 0  # nominal model: conditioned
    assert "conditioned on the given model" in capsys.readouterr().out
    calibration.write_text(yaml.safe_dump({"robot": "baxter_left", "parameters": {"left_s9.damping": 1.0}}))
    assert cli_main(args + small + ["--force"]) == 2
    assert "unknown parameter" in capsys.readouterr().err


def test_a_conditioned_map_follows_a_payload_change_and_a_rebuild_makes_it_exact(built, model):
    """After calibration the map serves the new model through h(q) and M_jj(q); the rebuild is exact."""
    simulator, tmap = built
    calibrated = model.with_payload(1.5)
    assert tmap.check_model(calibrated) is False
    fast_new = FastDynamics.from_model(calibrated)
    sim_new = make_simulator(calibrated, SMALL_GRID.dt, kind="rigid")
    q = tmap.contexts[1, 1].copy()
    qd = np.zeros(7)
    qd[1] = 0.2
    goal = q.copy()
    goal[1] += tmap.angle_axis[1]
    exact, _ = solve_one_step_torques(sim_new, torch.tensor(q)[None], torch.tensor(qd)[None], torch.tensor(goal)[None],
                                      torch.zeros(1, 7, dtype=torch.float64))
    stale = tmap.torques(FastDynamics.from_model(model), q, qd, goal)[1]  # the old model's h and M_jj
    conditioned = tmap.torques(fast_new, q, qd, goal)[1]
    assert abs(stale - exact[0, 1].item()) > 1.0  # the payload matters at s1
    assert abs(conditioned - exact[0, 1].item()) < CONDITIONED_PAYLOAD_TOL
    rebuilt = rebuild_torque_map(tmap, calibrated)
    assert rebuilt.check_model(calibrated) is True and rebuilt.simulator == tmap.simulator
    np.testing.assert_allclose(rebuilt.torques(fast_new, q, qd, goal)[1], exact[0, 1].item(), atol=1e-8)
    with pytest.raises(TorqueMapError, match="joints"):
        rebuild_torque_map(tmap, load_robot_config(BAXTER_LEFT.parent / "baxter_right.yaml").build_model())


def test_simulator_settings_of_a_map_description():
    assert simulator_settings("PBDSimulator(dt=0.01, substeps=10, compliance=0.0)") == ("pbd", 10)
    assert simulator_settings("RigidBodySimulator(dt=0.01, integrator=implicit_euler, passive=True, substeps=1)") == ("rigid", 1)
    with pytest.raises(TorqueMapError, match="cannot be rebuilt"):
        simulator_settings("MujocoSimulator(dt=0.01)")

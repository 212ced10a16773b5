"""Identification accuracy against MuJoCo ground truth (issue #4), written to RESULTS.md.

1. Calibration targets: for several random hidden truths (payload 0.5-2 kg, spring k +-30 %,
   offset +-0.05 rad, damping, a camera 1-2 m away) a bag is recorded on the MuJoCo plant
   (noise: joints 1e-4 rad, efforts 0.05 N·m, camera 1 mm / 0.2 deg), calibrated with the
   same code as ``diffsim-ros calibrate``, and compared with the truth and the issue's targets.
2. The paper's two spring-calibration schemes on the same data.
3. Torque estimation (Liu et al. Table IV layout): loss schemes x initializations, and MPC.

Run: ``.venv/bin/python -m benchmarks.bench_estimation [--seeds 3] [--simulator rigid|pbd]``.
"""

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import machine_line, markdown_table, write_section
from diffsim_ros import dynamics as dyn
from diffsim_ros.estimation.data import Dataset, static_poses_from_intervals
from diffsim_ros.estimation.identification import identify
from diffsim_ros.estimation.spring_fit import fit_spring_curve
from diffsim_ros.estimation.torque_estimation import INITIALIZATIONS, SCHEMES, TorqueEstimationSettings, estimate_torques
from diffsim_ros.io.bags import BagTopics
from diffsim_ros.pipelines.calibration import calibrate_bag
from diffsim_ros.io.recording import write_recording_bag
from diffsim_ros.model import load_robot_config
from diffsim_ros.resources import share_directory
from diffsim_ros.sim import RigidBodySimulator
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth, random_camera_pose
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record, torque_trajectory

TARGETS = {
    "payload mass": ("rel", 0.02),
    "payload COM [mm]": ("abs", 5.0),
    "spring stiffness": ("rel", 0.01),
    "spring offset [deg]": ("abs", 0.5),
    "camera position [mm]": ("abs", 2.0),
    "camera rotation [deg]": ("abs", 0.2),
    "damping (worst joint)": ("rel", 0.10),
    "held-out gravity RMSE [N·m]": ("abs", 0.05),
}


def _truth(model, rng):
    spring = model.springs[0]
    return PlantTruth(
        payload_mass=float(rng.uniform(0.5, 2.0)),
        payload_com=tuple(rng.uniform(-0.03, 0.03, 2)) + (float(rng.uniform(0.0, 0.08)),),
        springs={spring.joint: {"stiffness": spring.stiffness * float(rng.uniform(0.7, 1.3)),
                                "offset": spring.offset + float(rng.uniform(-0.05, 0.05))}},
        damping=tuple(model.params.damping.numpy() * rng.uniform(0.5, 1.5, model.nq)),
        camera_pose=random_camera_pose(rng),
    )


def _errors(run, truth, model, held_out):
    v = run.calibration.parameters
    spring = model.springs[0]
    true_spring = truth.springs[spring.joint]
    camera_error = np.linalg.inv(truth.camera_pose) @ run.camera_pose
    damping = np.array([v[f"{j}.damping"] for j in model.joint_names])
    q = torch.as_tensor(held_out.q)
    predicted = (dyn.gravity_torques(run.model, q) - dyn.spring_torques(run.model, q)).numpy()
    return {
        "payload mass": abs(v["payload.mass"] - truth.payload_mass) / truth.payload_mass,
        "payload COM [mm]": 1e3 * np.linalg.norm(np.array(v["payload.com"]) - truth.payload_com),
        "spring stiffness": abs(v[f"{spring.joint}.spring.stiffness"] - true_spring["stiffness"]) / true_spring["stiffness"],
        "spring offset [deg]": math.degrees(abs(v[f"{spring.joint}.spring.offset"] - true_spring["offset"])),
        "camera position [mm]": 1e3 * np.linalg.norm(camera_error[:3, 3]),
        "camera rotation [deg]": math.degrees(math.acos(np.clip((np.trace(camera_error[:3, :3]) - 1) / 2, -1, 1))),
        "damping (worst joint)": float(np.max(np.abs(damping - truth.damping) / np.array(truth.damping))),
        "held-out gravity RMSE [N·m]": float(np.sqrt(np.mean((predicted - held_out.effort) ** 2))),
    }


def calibration_targets(config, seeds):
    model = config.build_model()
    rows, seconds, verdicts = [], [], []
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        truth = _truth(model, rng)
        scenario = RecordingScenario(
            poses=nearest_neighbour_order(random_poses(model, 30, rng)), camera_frame=config.raw["camera"]["tracked_frame"],
            excitation=20.0, excitation_amplitude=(3, 6, 3, 3, 1, 1, 0.5), seed=seed,
        )
        rec = record(MujocoPlant(model, config.urdf, truth, seed=seed), model, scenario)
        held = record(MujocoPlant(model, config.urdf, truth, seed=50 + seed), model,
                      RecordingScenario(poses=nearest_neighbour_order(random_poses(model, 10, rng))))
        held_out = static_poses_from_intervals(held.joint_time, held.q, held.effort, held.holds)
        with tempfile.TemporaryDirectory() as tmp:
            bag = write_recording_bag(Path(tmp) / "bag", rec, BagTopics.from_config(config), storage="mcap")
            start = time.perf_counter()
            run = calibrate_bag(bag, config)
            seconds.append(time.perf_counter() - start)
        rows.append(_errors(run, truth, model, held_out))
        # What `diffsim-ros calibrate` would have said: errors of a refused fit are no result.
        verdicts.append(f"poor fit ({run.poor_fit})" if run.poor_fit else
                        f"not determined: {', '.join(run.undetermined)}" if run.undetermined else "ok")
    table = []
    for name, (kind, target) in TARGETS.items():
        values = [r[name] for r in rows]
        fmt = (lambda x: f"{100 * x:.3f} %") if kind == "rel" else (lambda x: f"{x:.4f}")
        worst = max(values)
        table.append([name, fmt(target), ", ".join(fmt(x) for x in values), "met" if worst < target else "**NOT met**"])
    return table, seconds, verdicts


def spring_schemes(config):
    model = config.build_model()
    rows = []
    for payload in (0.0, 1.0):
        rng = np.random.default_rng(4)
        truth = PlantTruth(payload, (0.0, 0.0, 0.05), {"left_s1": {"stiffness": 6500.0, "offset": 0.13}})
        rec = record(MujocoPlant(model, config.urdf, truth, seed=1), model,
                     RecordingScenario(poses=nearest_neighbour_order(random_poses(model, 20, rng))))
        poses = static_poses_from_intervals(rec.joint_time, rec.q, rec.effort, rec.holds)
        curve, _ = fit_spring_curve(model, poses, "left_s1")
        groups = ("spring",) if payload == 0 else ("payload", "spring")
        diff = identify(model, Dataset(static=poses), groups).values
        for name, values in (("curve fitting (s1 torque)", curve), (f"differentiable model ({'+'.join(groups)})", diff)):
            k, off = values["left_s1.spring.stiffness"], values["left_s1.spring.offset"]
            rows.append([f"{payload:.1f} kg", name, f"{k:.1f} ({100 * (k - 6500) / 6500:+.2f} %)", f"{math.degrees(off - 0.13):+.3f}"])
    return rows


def torque_table(config, simulator_kind, steps):
    model = config.build_model()
    plant = MujocoPlant(model, config.urdf, PlantTruth(), seed=1)
    tr = torque_trajectory(plant, model, np.array([0.0, -0.5, 0.0, 1.0, 0.0, 0.6, 0.0]), (steps + 5) * 0.01)
    sim = _simulator(model, simulator_kind)
    rows = []
    variants = [(s, i, TorqueEstimationSettings(scheme=s, initialization=i, iterations=1)) for s in SCHEMES for i in INITIALIZATIONS]
    variants.append(("both", "MPC H=3 (previous)", TorqueEstimationSettings(scheme="both", initialization="previous", horizon=3, smoothness_std=2.0, iterations=1)))
    for scheme, init, settings in variants:
        start = time.perf_counter()
        est = estimate_torques(sim, tr.q[:steps], tr.qd[:steps], settings)
        elapsed = time.perf_counter() - start
        rmse = np.sqrt(((est.torques - tr.tau[: len(est.torques)]) ** 2).mean(0))
        rows.append([scheme, init] + [f"{x:.3f}" for x in rmse] + [f"{1e3 * elapsed / len(est.torques):.0f}"])
    return rows, list(model.joint_names)


def _simulator(model, kind):
    if kind == "pbd":
        from diffsim_ros.sim import PBDSimulator

        return PBDSimulator(model, dt=0.01)
    return RigidBodySimulator(model, 0.01, substeps=10)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--simulator", choices=("rigid", "pbd"), default="rigid")
    parser.add_argument("--torque-steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_robot_config(share_directory() / "config" / "baxter_left.yaml")
    targets, seconds, verdicts = calibration_targets(config, args.seeds)
    springs = spring_schemes(config)
    torques, joints = torque_table(config, args.simulator, args.torque_steps)
    body = "\n".join([
        "## Identification against MuJoCo ground truth (Baxter left arm)",
        "",
        f"Measured {machine_line()}. `python -m benchmarks.bench_estimation --seeds {args.seeds}`.",
        "",
        f"### Calibration targets ({args.seeds} random hidden truths; bag -> `calibrate_bag`, as `diffsim-ros calibrate`)",
        "",
        "Truth: payload 0.5-2 kg, spring k x U(0.7, 1.3), offset +- 0.05 rad, damping x U(0.5, 1.5), camera 1-2 m; "
        "sensor noise joints 1e-4 rad, efforts 0.05 N·m, camera 1 mm / 0.2 deg. Held-out: 10 poses of a second recording.",
        "",
        markdown_table(["quantity", "target", "error per seed", "status"], targets),
        "",
        f"Calibration time per bag (30 poses + 20 s excitation, statics + camera + damping): "
        f"{', '.join(f'{s:.1f} s' for s in seconds)}. Verdict per seed (as `diffsim-ros calibrate`): {'; '.join(verdicts)}.",
        "",
        "### Spring calibration: curve fitting vs the differentiable model (true k = 6500 N/m, offset 0.13 rad)",
        "",
        markdown_table(["unknown payload", "scheme", "stiffness (error)", "offset error [deg]"], springs),
        "",
        f"### Torque estimation (Liu et al. Table IV layout; {args.simulator} simulator, {args.torque_steps} steps at 100 Hz, "
        "1 Gauss-Newton iteration per step; RMSE vs the applied torques [N·m])",
        "",
        markdown_table(["loss", "initialization"] + joints + ["ms/step"], torques),
        "",
        "The paper's best s1 error on the real Baxter is 1.726 N·m; the target here is < 0.5 N·m. The angle-only "
        "loss is limited by the 1e-4 rad angle noise: a torque error of 1 N·m moves s1 by only ~2e-5 rad in one step. The initialization hardly matters here: with implicit-Euler substeps the one-step map is affine in the torque, so one Gauss-Newton iteration converges from any start (the paper's gradient-descent solver is sensitive to it); \"previous\" and MPC are solved sequentially, hence their cost per step.",
    ])
    write_section("estimation", body)
    print(body)


if __name__ == "__main__":
    main()

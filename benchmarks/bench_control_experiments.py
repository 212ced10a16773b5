"""Closed-loop control experiments against MuJoCo as the robot (issue #5), with figures.

1. Calibrate payload and shoulder spring from a MuJoCo recording (the plant's true values are
   hidden from the controllers).
2. Gravity compensation: drift of pure gravity-compensation holds, nominal vs calibrated model.
3. The paper's impedance experiment (Fig. 13): s1 goal -0.45 rad, external torque on s1 of
   5 N·m during 5-15 s and 10 N·m during 20-30 s; PD only vs impedance (analytic and
   torque-map model terms) -> ``benchmarks/figures/impedance_fig13.png``.
4. Torque maps: build time, validation against direct optimization at off-grid points,
   inertia-conditioned vs the paper's single-configuration map -> ``figures/torque_map.png``.
5. MPC tracking on MuJoCo, calibrated vs nominal model, the three initializations.

Run: ``.venv/bin/python -m benchmarks.bench_control_experiments`` (about 20 minutes on 2 busy cores,
mostly building the default 21 x 21 x 5 map through PBD).
"""

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import machine_line, markdown_table, write_section
from diffsim_ros.control import (
    GravityCompensation,
    JointImpedanceController,
    MinimumJerkMove,
    ModelPredictiveController,
    MPCSettings,
    SafetyConfig,
    SafetyLayer,
    TorqueMapGrid,
    build_torque_map,
    validate_torque_map,
)
from diffsim_ros.sim import make_simulator
from diffsim_ros.viz.torque_map import plot_torque_map
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.estimation.data import Dataset
from diffsim_ros.estimation.identification import identify
from diffsim_ros.model import load_robot_config
from diffsim_ros.resources import share_directory
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
from diffsim_ros.estimation.data import static_poses_from_intervals

FIGURES = Path(__file__).resolve().parent / "figures"
PLANT_DT = 1e-3  # [s]
TRUTH = PlantTruth(1.3, (0.02, -0.01, 0.06), {"left_s1": {"stiffness": 9600.0, "offset": 0.14}})
HOLD_SECONDS, RAMP_IN, DRIFT_POSES = 5.0, 0.3, 10
DRIFT_BOUND = 0.05  # [rad] stated bound on the calibrated drift over 5 s
Q_START = np.array([0.0, 0.0, 0.0, 0.9, 0.0, 0.8, 0.0])
S1_GOAL = -0.45
STIFFNESS = np.array([100.0, 100.0, 50.0, 50.0, 15.0, 15.0, 10.0])  # [N·m/rad]; damping = stiffness / 10
STIFF_SAFETY = SafetyConfig(output="ros2_control", torque_rate_limit=5000.0)
FIG13_SECONDS = 35.0
CONTROLLERS = {
    "PD only": "none",
    "PD + gravity compensation": "gravity",
    "impedance, analytic model term": "analytic",
    "impedance, torque-map feedforward (map, compliant)": "map",
    "impedance, torque-map servo (map_servo, stiff)": "map_servo",
}


def calibrate(config, nominal):
    """Recording on the plant, then payload + spring identification: (model, lines)."""
    plant = MujocoPlant(nominal, config.urdf, TRUTH, seed=3)
    poses = nearest_neighbour_order(random_poses(nominal, 36, np.random.default_rng(7)))
    rec = record(plant, nominal, RecordingScenario(poses=poses, settle=2.0, hold=1.0, camera_rate=0))
    result = identify(nominal, Dataset(static=_hold_averages(rec)), ("payload", "spring"))
    v = result.values
    rows = [
        ["payload.mass [kg]", "0", f"{TRUTH.payload_mass}", f"{float(v['payload.mass']):.4f}"],
        ["payload.com [mm]", "0, 0, 0", ", ".join(f"{1e3 * x:.1f}" for x in TRUTH.payload_com), ", ".join(f"{1e3 * x:.2f}" for x in v["payload.com"])],
        ["left_s1.spring.stiffness [N/m]", "8000", "9600", f"{float(v['left_s1.spring.stiffness']):.1f}"],
        ["left_s1.spring.offset [rad]", "0.10", "0.14", f"{float(v['left_s1.spring.offset']):.5f}"],
    ]
    return result.model, markdown_table(["parameter", "nominal", "true (hidden)", "calibrated"], rows)


def run_loop(plant, controller, safety, seconds, external=None, every=1, held=0.0):
    """Closed loop on the plant; returns (times (T,), true q (T, n), commands (T, n))."""
    start = plant.true_state()[0]
    times, positions, commands, command = [], [], [], None
    for k in range(int(round(seconds / PLANT_DT))):
        t = k * PLANT_DT
        if t < held:
            plant.reset(start)  # held while the safety layer ramps the torque in
        if external is not None:
            plant.set_external_torque(external(t))
        if k % every == 0:
            q, qd, _ = plant.read_joint_state()
            command, _ = safety.filter(t, controller.compute(t, q, qd), q, qd)
        plant.step(command)
        times.append(t + PLANT_DT)
        positions.append(plant.true_state()[0])
        commands.append(command)
    return np.array(times), np.array(positions), np.array(commands)


def gravity_drift(config, nominal, calibrated):
    poses = random_poses(nominal, DRIFT_POSES, np.random.default_rng(11), margin=0.4)
    rows, worst = [], {}
    for name, model in (("nominal", nominal), ("calibrated", calibrated)):
        plant = MujocoPlant(nominal, config.urdf, TRUTH, seed=5)
        drifts = []
        for q0 in poses:
            plant.reset(q0)
            t, q, _ = run_loop(plant, GravityCompensation(model), SafetyLayer(model), HOLD_SECONDS + RAMP_IN, held=RAMP_IN)
            drifts.append(np.abs(q - q0).max(1))
        drifts = np.array(drifts)  # (poses, T)
        at = {s: drifts[:, int(round((RAMP_IN + s) / PLANT_DT)) - 1] for s in (1.0, 5.0)}
        worst[name] = drifts.max()
        rows.append([name, f"{np.median(at[1.0]):.4f}", f"{at[1.0].max():.4f}", f"{np.median(at[5.0]):.4f}", f"{at[5.0].max():.4f}"])
    return rows, worst


def _disturbance(t):
    tau = np.zeros(7)
    tau[1] = 5.0 if 5.0 <= t < 15.0 else 10.0 if 20.0 <= t < 30.0 else 0.0
    return tau


def impedance_experiment(config, nominal, calibrated, tmap):
    goal = Q_START.copy()
    goal[1] = S1_GOAL
    traces, rows = {}, []
    for name, term in CONTROLLERS.items():
        plant = MujocoPlant(nominal, config.urdf, TRUTH, seed=5)
        plant.reset(Q_START)
        reference = MinimumJerkMove(Q_START, goal, 0.0, 2.0)
        controller = JointImpedanceController(calibrated, STIFFNESS, STIFFNESS / 10, reference, model_term=term, torque_map=tmap)
        t, q, tau = run_loop(plant, controller, SafetyLayer(calibrated, STIFF_SAFETY), FIG13_SECONDS, _disturbance)
        traces[name] = (t, q[:, 1], tau[:, 1])
        error = np.abs(q[:, 1] - S1_GOAL)

        def window(a, b, error=error, t=t):
            return error[(t >= a) & (t < b)].max()

        rows.append([name, f"{window(3, 5) * 1e3:.2f}", f"{window(5, 15) * 1e3:.2f}", f"{window(20, 30) * 1e3:.2f}", f"{window(32, 35) * 1e3:.2f}"])
    _plot_fig13(traces)
    return rows


def _plot_fig13(traces):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_q, ax_tau) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for name, (t, q, tau) in traces.items():
        ax_q.plot(t, q, label=name, lw=1.2)
        ax_tau.plot(t, tau, label=name, lw=0.8)
    for ax in (ax_q, ax_tau):
        ax.axvspan(5, 15, color="0.9")
        ax.axvspan(20, 30, color="0.8")
    ax_q.axhline(S1_GOAL, color="k", ls="--", lw=0.8, label="goal -0.45 rad")
    ax_q.set_ylabel("left_s1 angle [rad]")
    ax_q.set_title("Baxter s1 under external torque (MuJoCo plant): 5 N·m in 5-15 s, 10 N·m in 20-30 s")
    ax_q.legend(fontsize=8, loc="upper right")
    ax_tau.set_ylabel("commanded s1 torque [N·m]")
    ax_tau.set_xlabel("time [s]")
    fig.tight_layout()
    fig.savefig(FIGURES / "impedance_fig13.png", dpi=110)
    plt.close(fig)


def torque_maps(calibrated):
    """Maps through PBD (the default, 10 substeps) and the rigid-body simulator, conditioned or not."""
    fast = FastDynamics.from_model(calibrated)
    rows, maps = [], {}
    for kind in ("pbd", "rigid"):
        simulator = make_simulator(calibrated, 0.01, kind=kind)
        for contexts in (5, 1):
            tmap = build_torque_map(simulator, TorqueMapGrid(inertia_contexts=contexts))
            report = validate_torque_map(tmap, simulator, fast, samples=20)
            maps[(kind, contexts)] = tmap
            label = f"{contexts} inertia contexts" if contexts > 1 else "1 configuration (paper)"
            rows.append(
                [tmap.simulator.split("(")[0] + f" ({simulator.settings.substeps if kind == 'pbd' else 1} substeps)", label,
                 f"{tmap.build_seconds:.1f} s"]
                + [f"{r:.3g} / {m:.3g}" for r, m in zip(report["rms"], report["max"])]
            )
    plot_torque_map(maps[("pbd", 5)], FIGURES / "torque_map.png")
    return rows, maps[("pbd", 5)], list(calibrated.joint_names)


def mpc_tracking(config, nominal, calibrated):
    goal = Q_START.copy()
    goal[0], goal[1] = 0.3, S1_GOAL
    rows = []
    variants = [("calibrated", calibrated, "rigid", init, 1) for init in ("zero", "previous", "gravity")]
    variants += [("calibrated", calibrated, "rigid", "previous", 5), ("calibrated", calibrated, "pbd", "previous", 5)]
    variants += [("nominal", nominal, "rigid", "previous", 1)]
    for name, model, kind, init, every in variants:
        plant = MujocoPlant(nominal, config.urdf, TRUTH, seed=5)
        plant.reset(Q_START)
        reference = MinimumJerkMove(Q_START, goal, 0.0, 1.5)
        simulator = make_simulator(model, 0.01, substeps=1, kind=kind)
        mpc = ModelPredictiveController(simulator, reference, MPCSettings(initialization=init, max_iterations=1, jacobian_every=every))
        seconds = []

        def timed(t, q, qd, mpc=mpc, seconds=seconds):
            tau = mpc.compute(t, q, qd)
            seconds.append(mpc.last.seconds)
            return tau

        controller = type("Timed", (), {"compute": staticmethod(timed)})
        t, q, _ = run_loop(plant, controller, SafetyLayer(model, STIFF_SAFETY), 2.5, every=10)
        error = np.abs(q - np.array([reference(x)[0] for x in t])).max(1)
        rows.append([name, kind, init, str(every), f"{error.max() * 1e3:.2f}", f"{np.sqrt(np.mean(error**2)) * 1e3:.2f}", f"{error[-1] * 1e3:.3f}", f"{np.mean(seconds) * 1e3:.1f} ms"])
    return rows


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, not a run
    torch.set_num_threads(1)
    FIGURES.mkdir(exist_ok=True)
    started = time.perf_counter()
    config = load_robot_config(share_directory() / "config" / "baxter_left.yaml")
    nominal = config.build_model()
    calibrated, calibration_table = calibrate(config, nominal)
    drift_rows, worst = gravity_drift(config, nominal, calibrated)
    map_rows, tmap, joints = torque_maps(calibrated)
    fig13_rows = impedance_experiment(config, nominal, calibrated, tmap)
    mpc_rows = mpc_tracking(config, nominal, calibrated)
    met = worst["calibrated"] < DRIFT_BOUND
    body = "\n".join([
        "## Control experiments: closed loop on MuJoCo (hidden payload 1.3 kg and spring k +20 %, offset +0.04 rad)",
        "",
        f"Measured {machine_line()}; `python -m benchmarks.bench_control_experiments` ({time.perf_counter() - started:.0f} s). "
        "The plant is MuJoCo with the true parameters, noisy sensors (1e-4 rad, 1e-3 rad/s, 0.05 N·m), no friction; "
        "controllers only know the nominal or the calibrated model; every command goes through the SafetyLayer.",
        "",
        "### Calibration (36 static poses recorded on the plant, payload + spring identified)",
        "",
        calibration_table,
        "",
        f"### Gravity compensation: drift of pure gravity-compensation holds [rad] ({DRIFT_POSES} random poses, 1 kHz)",
        "",
        "Largest joint deviation from the start pose after release (the arm is held for the first "
        f"{RAMP_IN} s while the default 200 N·m/s rate limit ramps the torque in). Frictionless plant: any torque error "
        "integrates, so this is the hardest case.",
        "",
        markdown_table(["model", "median after 1 s", "max after 1 s", "median after 5 s", "max after 5 s"], drift_rows),
        "",
        f"- Stated bound: calibrated drift < {DRIFT_BOUND} rad over {HOLD_SECONDS:.0f} s at every pose: worst "
        f"**{worst['calibrated']:.4f} rad** ({'met' if met else 'NOT met'}); nominal model worst **{worst['nominal']:.2f} rad** "
        "(the arm falls: the payload is unknown to it).",
        "",
        "### Impedance experiment (paper Fig. 13), calibrated model, PBD-built torque map, 1 kHz",
        "",
        "s1 goal -0.45 rad (2 s minimum-jerk move from 0), external torque on s1: 5 N·m in 5-15 s, 10 N·m in 20-30 s. "
        "K = [100, 100, 50, 50, 15, 15, 10] N·m/rad, D = K / 10, model scale 1. Largest |s1 - goal| [mrad] per window. "
        "Figure: `benchmarks/figures/impedance_fig13.png`.",
        "",
        markdown_table(["controller", "settled 3-5 s", "5 N·m, 5-15 s", "10 N·m, 20-30 s", "after, 32-35 s"], fig13_rows),
        "",
        "- The torque-map model term takes each joint to the reference in one map step (dt = 0.01 s), i.e. a stiff "
        "(~M/dt² per joint) but bounded (|Δθ| ≤ 0.00625 rad) correction; it needs the safety rate limit raised to "
        "5000 N·m/s here (the default 200 N·m/s lags it into oscillation) and a control rate well above 100 Hz.",
        "",
        "### Torque maps (calibrated model, 21 x 21 grid, |Δθ| ≤ 0.00625 rad, |ω| ≤ 0.5 rad/s, dt = 0.01 s)",
        "",
        "Validation: net torque of the map vs direct optimization (Newton through the simulator) at 20 random off-grid "
        "keys and random configurations per joint; cells are RMS / max error [N·m]. Figure: `benchmarks/figures/torque_map.png`.",
        "",
        markdown_table(["simulator", "conditioning", "build"] + joints, map_rows),
        "",
        "- Conditioning on the joint inertia M_jj(q) (the dynamic part is affine in it once h(q) = g - τ_spring is "
        "subtracted analytically) brings the error from tens of N·m (the paper's single-configuration map; s0's inertia "
        "varies 40-fold) to a few 0.01 N·m through PBD (its substeps make the step slightly nonlinear) and ~1e-12 N·m "
        "through the one-substep rigid-body simulator (exactly affine). Lookup cost: see the `control` section.",
        "",
        "### MPC tracking on MuJoCo (horizon 3, dt = 0.01 s, 1 Gauss-Newton iteration per call, 100 Hz zero-order hold)",
        "",
        "Move of s0 by 0.3 rad and s1 to -0.45 rad in 1.5 s, 2.5 s run. Errors in mrad (largest joint).",
        "",
        markdown_table(["model", "simulator", "initialization", "jacobian every", "max error", "RMS error", "final error", "mean call"], mpc_rows),
    ])
    write_section("control experiments", body)
    print(body)


def _hold_averages(rec):
    """Static poses averaged over the settled holds of a recording."""
    return static_poses_from_intervals(rec.joint_time, rec.q, rec.effort, rec.holds)


if __name__ == "__main__":
    main()

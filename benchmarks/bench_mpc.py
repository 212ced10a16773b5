"""Compiled MPC against Crocoddyl on the same problem, in one run (issue 17).

Problem (both solvers): Baxter's left arm (nominal URDF, rigid, no passive terms), Euler steps
of dt = 0.01 s (semi-implicit: ``v+ = v + dt a``, ``q+ = q + dt v+``), horizon H, one
Gauss-Newton / FDDP iteration per call, warm-started from the previous solution; cost terms:
position and velocity tracking of the reference at the predicted states (tolerances 1e-3 rad,
2e-2 rad/s) and torque regularization to the holding torque (100 N·m). The package's
torque-smoothness term is off here because Crocoddyl has no control-difference residual; the
"shipped" rows run the controller node's defaults (springs, damping, friction, smoothness,
two iterations) on the same loop. Each solver closes the loop on a Pinocchio plant (ABA,
10 substeps per period) tracking a 0.45 rad minimum-jerk move; the time per call includes
each side's Python work (references, warm start). Crocoddyl's dynamics are checked against
``pin.aba`` before it is timed (crocoddyl 3.2.1 with pin 4.1.0 returned wrong accelerations).
The "through PBD" row runs the same compiled solver predicting with the compiled PBD step of the
same model (1 substep, 2 projection iterations) and its exact Jacobians on every iteration
(vector forward-mode tangents propagated beside one run of the compiled kernel), closing the loop
on that PBD step.

Run: ``.venv/bin/python -m benchmarks.bench_mpc`` (Crocoddyl: ``pip install -e '.[bench]'``);
``--only-pbd`` re-measures the through-PBD row and its note alone, in place (and rewrites the
problem paragraph, which describes that row).
"""

import argparse
import os
import time
from dataclasses import replace

import numpy as np

from benchmarks.common import RESULTS, load_note, machine_line, markdown_table, median, write_section
from diffsim_ros.control import MinimumJerkMove, MPCSettings, ModelPredictiveController
from diffsim_ros.control.mpc_fast import FastModelPredictiveController, make_mpc
from diffsim_ros.sim import make_simulator
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim import RigidBodySimulator
from diffsim_ros.sim.pbd.fast_jacobians import pbd_step_jacobians
from diffsim_ros.sim.rigid_fast import FastRigidStep
from oracles import BAXTER_LEFT, BAXTER_URDF, PinocchioOracle

DT = 0.01  # [s]
CALLS = 200  # closed-loop calls per solver and horizon
TORCH_CALLS = 40  # the torch reference is slow
PBD_CALLS = 60
PROFILE_REPEATS = 100
PBD_ROW = "diffsim_ros through PBD: compiled Riccati solver, exact step Jacobians (forward-mode tangents)"
PBD_ROW_START = "| diffsim_ros through PBD"  # this row in every version of the section
HORIZONS = (3, 10, 30)
PLANT_SUBSTEPS = 10
Q0 = np.array([0.0, -0.3, 0.0, 0.8, 0.0, 0.6, 0.0])
MOVE = np.array([0.45, -0.45, 0.0, 0.45, 0.0, 0.0, 0.0])  # [rad] 0.45 rad on three joints
MOVE_SECONDS = 1.2
PEER_DYNAMICS_TOL = 1e-8  # [rad/s²] Crocoddyl vs pin.aba
COMPARISON = dict(max_iterations=1, initialization="previous", smoothness_tolerance=1e12, step_tolerance=0.0)


class PinocchioPlant:
    """The rigid arm integrated by pin.aba with fine semi-implicit Euler substeps."""

    def __init__(self, oracle):
        self.o = oracle

    def step(self, q, qd, tau):
        o, h = self.o, DT / PLANT_SUBSTEPS
        for _ in range(PLANT_SUBSTEPS):
            qdd = o.sel(o.pin.aba(o.model, o.data, o.q(q), o.v(qd), o.v(tau)))
            qd = qd + h * qdd
            q = q + h * qd
        return q, qd


def closed_loop(controllers, plants, reference, calls):
    """Close the loop of every ``controller(t, q, qd)`` on its plant, the controllers taking turns
    call by call (so that load from other jobs affects them alike).

    Returns:
        Per controller: (per-call times [s], largest tracking error [rad]).
    """
    states = [(Q0.copy(), np.zeros(7)) for _ in controllers]
    times, worst = [[] for _ in controllers], [0.0 for _ in controllers]
    for k in range(calls):
        for i, (controller, plant) in enumerate(zip(controllers, plants)):
            q, qd = states[i]
            start = time.perf_counter()
            tau = controller(k * DT, q, qd)
            times[i].append(time.perf_counter() - start)
            if tau is None:
                raise RuntimeError(f"controller {i} failed at call {k}")
            q, qd = plant.step(q, qd, tau)
            states[i] = (q, qd)
            worst[i] = max(worst[i], float(np.abs(q - reference((k + 1) * DT)[0]).max()))
    return list(zip(times, worst))


class PBDPlant:
    """The compiled PBD step of a PBD-predicting controller as the plant."""

    def __init__(self, mpc):
        self.pbd, self.dt, self.settings = mpc.pbd, mpc.simulator.dt, mpc.simulator.settings

    def step(self, q, qd, tau):
        q_out, qd_out, _ = self.pbd.rollout(q[None], qd[None], np.asarray(tau)[None, None], self.dt, self.settings)
        return q_out[0, 0], qd_out[0, 0]


class CrocoddylMPC:
    """The same MPC in Crocoddyl: FDDP on IntegratedActionModelEuler nodes, warm-started."""

    def __init__(self, crocoddyl, oracle, fast, reference, horizon, settings):
        self.croc, self.o, self.fast, self.reference, self.horizon = crocoddyl, oracle, fast, reference, horizon
        pm, n = oracle.model, 7
        state = crocoddyl.StateMultibody(pm)
        actuation = crocoddyl.ActuationModelFull(state)
        weights = np.concatenate([np.full(n, settings.position_tolerance ** -2), np.full(n, settings.velocity_tolerance ** -2)])
        self.track, self.effort, nodes = [], [], []
        for k in range(horizon + 1):
            costs = crocoddyl.CostModelSum(state, n)
            track = crocoddyl.ResidualModelState(state, np.zeros(2 * n), n)
            # Euler nodes scale running costs by dt; node k's state is x_k (x_0 is fixed)
            scale = 0.0 if k == 0 else (1.0 if k == horizon else 1.0 / DT)
            costs.addCost("track", crocoddyl.CostModelResidual(state, crocoddyl.ActivationModelWeightedQuad(weights * scale), track), 1.0)
            if k < horizon:
                effort = crocoddyl.ResidualModelControl(state, np.zeros(n))
                act = crocoddyl.ActivationModelWeightedQuad(np.full(n, settings.effort_tolerance ** -2 / DT))
                costs.addCost("effort", crocoddyl.CostModelResidual(state, act, effort), 1.0)
                self.effort.append(effort)
            self.track.append(track)
            dam = crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, costs)
            nodes.append(crocoddyl.IntegratedActionModelEuler(dam, DT if k < horizon else 0.0))
        self.problem = crocoddyl.ShootingProblem(np.zeros(2 * n), nodes[:-1], nodes[-1])
        self.problem.nthreads = 1  # as ours; OpenMP threads only contend on a loaded 2-core machine
        self.solver = crocoddyl.SolverFDDP(self.problem)
        self.dam = nodes[0].differential
        self.xs = self.us = None
        self.last_t = None

    def check_dynamics(self, samples=20):
        """Largest |a_crocoddyl - pin.aba| [rad/s²] over random states."""
        o, rng = self.o, np.random.default_rng(0)
        data, worst = self.dam.createData(), 0.0
        for _ in range(samples):
            q, qd, tau = rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7), rng.uniform(-10, 10, 7)
            self.dam.calc(data, np.concatenate([q, qd]), tau)
            worst = max(worst, float(np.abs(data.xout - o.sel(o.pin.aba(o.model, o.data, o.q(q), o.v(qd), o.v(tau)))).max()))
        return worst

    def __call__(self, t, q, qd):
        x0 = np.concatenate([q, qd])
        hold = self.fast.gravity_torques(q)
        for k in range(1, self.horizon + 1):
            q_d, qd_d, _ = self.reference(t + k * DT)
            self.track[k].reference = np.concatenate([q_d, qd_d])
        for effort in self.effort:
            effort.reference = hold
        self.problem.x0 = x0
        if self.us is None:
            xs, us = [x0] * (self.horizon + 1), [hold] * self.horizon
        else:  # shift the previous solution by one period
            xs, us = [x0] + list(self.xs[2:]) + [self.xs[-1]], list(self.us[1:]) + [self.us[-1]]
        self.solver.solve(xs, us, 1, False)
        self.xs, self.us = self.solver.xs, self.solver.us
        return np.array(self.us[0])


def _solver_iteration(mpc, q, qd):
    """Median time [s] of one Gauss-Newton iteration inside the compiled solver (rollout, exact Jacobians, Riccati):
    calls of 2 minus 1 iterations from the same state, interleaved."""
    simulator, reference = mpc.simulator, mpc.reference
    solvers = [make_mpc(simulator, reference, replace(mpc.settings, max_iterations=k, step_tolerance=0.0)) for k in (1, 2)]
    times = [[], []]
    for _ in range(PROFILE_REPEATS):
        for solver, series in zip(solvers, times):
            solver.reset()
            begin = time.perf_counter()
            solver.compute(0.1, q, qd)
            series.append(time.perf_counter() - begin)
    return median(times[1]) - median(times[0])


def pbd_profile(mpc, per_call, mean_iterations):
    """Where a PBD MPC call's time goes: one solver iteration, and the step with its exact Jacobians
    (forward-mode tangents) called alone [text]."""
    q, qd, settings, n, horizon = Q0 + 0.1, np.full(7, 0.2), mpc.simulator.settings, 7, mpc.settings.horizon
    tau = mpc.fast.gravity_torques(q)
    times = {with_state: [] for with_state in (True, False)}
    for _ in range(PROFILE_REPEATS):  # interleaved: load from other jobs affects all alike
        for with_state, series in times.items():
            begin = time.perf_counter()
            pbd_step_jacobians(mpc.pbd, q, qd, tau, DT, settings, with_state=with_state)
            series.append(time.perf_counter() - begin)
    jac, jac_b = (median(times[key]) for key in times)
    iteration = _solver_iteration(mpc, q, qd)
    return (f"Through PBD, where the time goes: the calls made {mean_iterations:.2f} Gauss-Newton iterations on average; "
            f"one iteration inside the compiled solver (rollout of the {horizon} steps with their exact Jacobians, B alone "
            f"at the first step since its start state is given, and the Riccati pass) takes {iteration * 1e3:.3f} ms "
            f"(calls of 2 minus 1 iterations from one state), against {per_call * 1e3:.2f} ms per call. Called alone from "
            f"Python (argument conversion and work areas included, which the solver pays once per call), one PBD step with "
            f"A and B by forward-mode tangents (one float64 run, all {3 * n} input directions propagated beside it) takes "
            f"{jac * 1e3:.3f} ms, with B alone ({n} directions) {jac_b * 1e3:.3f} ms.")


def through_pbd(config_model, reference, shipped):
    """The through-PBD row (closed loop on the PBD step) and its where-the-time-goes note."""
    pbd_mpc = make_mpc(make_simulator(config_model, DT, "pbd", substeps=1), reference, shipped)
    iterations = []

    def pbd_call(t, q, qd):
        tau = pbd_mpc.compute(t, q, qd)
        iterations.append(pbd_mpc.last.iterations)
        return tau

    ((times, worst),) = closed_loop([pbd_call], [PBDPlant(pbd_mpc)], reference, PBD_CALLS)
    row = [f"{PBD_ROW}, shipped settings", shipped.horizon, _rate(median(times)),
           f"{worst * 1e3:.3f} (plant: the same PBD model, {PBD_CALLS} calls)"]
    return row, pbd_profile(pbd_mpc, median(times), float(np.mean(iterations)))


def only_pbd(load):
    """Re-measure the through-PBD row and its note alone, in place in the written section."""
    config_model = load_robot_config(BAXTER_LEFT).build_model()
    row, note = through_pbd(config_model, MinimumJerkMove(Q0, Q0 + MOVE, 0.0, MOVE_SECONDS), MPCSettings())
    row[-1] += f"; re-measured alone (--only-pbd), load average {load:.2f}"
    begin, end = "<!-- BEGIN mpc -->", "<!-- END mpc -->"
    text = RESULTS.read_text()
    if begin not in text or end not in text:
        raise SystemExit("no mpc section in RESULTS.md yet: run the whole benchmark first")
    lines = text.split(begin, 1)[1].split(end, 1)[0].strip().splitlines()
    replacements = {
        PBD_ROW_START: markdown_table(["solver", "H", "median time per call (rate)", "worst tracking error [mrad]"], [row]).splitlines()[-1],
        "Through PBD, where the time goes": note,
        "Problem (both solvers)": __doc__.split("\n\n")[1].replace("\n", " "),
    }
    lines = [next((new for start, new in replacements.items() if line.startswith(start)), line) for line in lines]
    write_section("mpc", "\n".join(lines))
    print(row, note, sep="\n")


def _rate(seconds):
    return f"{seconds * 1e3:.3f} ms ({1.0 / seconds / 1e3:.2f} kHz)" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms ({1.0 / seconds:.0f} Hz)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only-pbd", action="store_true", help="re-measure the through-PBD row and its note alone")
    args = parser.parse_args()
    start = time.perf_counter()
    load = os.getloadavg()[0]  # other jobs on the machine make every figure noisy
    if args.only_pbd:
        only_pbd(load)
        return
    config_model = load_robot_config(BAXTER_LEFT).build_model()
    nominal = config_model.with_springs(()).with_parameters(
        {f"{j}.{key}": 0.0 for j in config_model.joint_names for key in ("damping", "friction")}
    )
    oracle = PinocchioOracle(nominal, BAXTER_URDF)
    reference = MinimumJerkMove(Q0, Q0 + MOVE, 0.0, MOVE_SECONDS)
    predictor = RigidBodySimulator(nominal, DT, passive=False)
    try:
        import crocoddyl
    except ImportError:
        crocoddyl = None
    rows, ours_by_h, croc_by_h, notes = [], {}, {}, []
    for horizon in HORIZONS:
        settings = MPCSettings(horizon=horizon, **COMPARISON)
        ours = FastModelPredictiveController(predictor, reference, settings)
        ours.compute(0.0, Q0, np.zeros(7))  # compile / load the cached kernels
        ours.reset()
        controllers = [ours.compute]
        if crocoddyl is not None:
            peer = CrocoddylMPC(crocoddyl, oracle, ours.fast, reference, horizon, settings)
            error = peer.check_dynamics()
            if error < PEER_DYNAMICS_TOL:
                controllers.append(peer)
            else:
                notes.append(f"Crocoddyl {crocoddyl.__version__}: dynamics differ from pin.aba by {error:.3g} rad/s², not timed")
                crocoddyl = None
        results = closed_loop(controllers, [PinocchioPlant(oracle) for _ in controllers], reference, CALLS)
        ours_by_h[horizon] = median(results[0][0])
        rows.append(["diffsim_ros compiled, 1 iteration", horizon, _rate(ours_by_h[horizon]), f"{results[0][1] * 1e3:.3f}"])
        if len(results) > 1:
            croc_by_h[horizon] = median(results[1][0])
            rows.append([f"Crocoddyl {crocoddyl.__version__} FDDP, Euler, 1 iteration", horizon, _rate(croc_by_h[horizon]),
                         f"{results[1][1] * 1e3:.3f}"])
        print(rows[-2:] if crocoddyl is not None else rows[-1], flush=True)
    shipped = MPCSettings()
    mpc = FastModelPredictiveController(RigidBodySimulator(config_model, DT), reference, shipped)
    # its model has Baxter's springs, damping and friction: the plant is that model, 10 substeps
    ((times, worst),) = closed_loop([mpc.compute], [FastRigidStep(config_model, DT, PLANT_SUBSTEPS, parameters=())], reference, CALLS)
    rows.append([f"diffsim_ros compiled, shipped settings ({shipped.max_iterations} iterations, springs, damping, friction, smoothness)",
                 shipped.horizon, _rate(median(times)), f"{worst * 1e3:.3f} (plant: the same model, 10 substeps)"])
    row, note = through_pbd(config_model, reference, shipped)
    rows.append(row)
    notes.append(note)
    torch_mpc = ModelPredictiveController(predictor, reference, MPCSettings(horizon=3, **COMPARISON))
    ((times, worst),) = closed_loop([torch_mpc.compute], [PinocchioPlant(oracle)], reference, TORCH_CALLS)
    rows.append(["diffsim_ros torch reference, 1 iteration", 3, _rate(median(times)), f"{worst * 1e3:.3f} ({TORCH_CALLS} calls)"])
    print(rows[-2:], flush=True)
    ratio = {h: croc_by_h[h] / ours_by_h[h] if h in croc_by_h else float("nan") for h in HORIZONS}
    body = "\n\n".join([
        "## MPC: compiled solver vs Crocoddyl (`python -m benchmarks.bench_mpc`)",
        machine_line() + (f"; Crocoddyl {crocoddyl.__version__}" if crocoddyl is not None else "; Crocoddyl not installed")
        + f"; load average {load:.2f} at the start" + load_note(load),
        __doc__.split("\n\n")[1].replace("\n", " "),
        markdown_table(["solver", "H", "median time per call (rate)", "worst tracking error [mrad]"], rows),
        "Ratio = Crocoddyl's time per call / ours (above 1: we are faster): "
        + ", ".join(f"H={h} {ratio[h]:.2f}" for h in HORIZONS),
        *notes,
        f"Run time {time.perf_counter() - start:.0f} s.",
    ])
    write_section("mpc", body)
    print(f"mpc ratio to crocoddyl: H=3 {ratio[3]:.2f}, H=30 {ratio[30]:.2f}")


if __name__ == "__main__":
    main()

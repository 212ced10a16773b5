"""Control-loop speed against a Pinocchio-based computation of the same control laws (issue #5).

One run measures: control-cycle latency (law + safety filter) of gravity compensation and
impedance (analytic and torque-map model terms), the same laws on Pinocchio, the torque-map
lookup, and the MPC step rate for the paper's three initializations.
Run: ``.venv/bin/python -m benchmarks.bench_control``.
"""

import argparse
import os
import time

import numpy as np
import torch

from benchmarks.common import machine_line, markdown_table, median, percentile, time_call, write_section
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
)
from diffsim_ros.control.mpc_fast import make_mpc
from diffsim_ros.sim import make_simulator
from diffsim_ros.model import load_robot_config
from diffsim_ros.resources import share_directory
from diffsim_ros.testbed.mujoco_plant import MujocoPlant

TARGET_CYCLE_P99_US = 300.0
TARGET_MPC_HZ = 50.0
CYCLES = 5000
MPC_CALLS = 60
STIFFNESS = np.array([100.0, 100.0, 50.0, 50.0, 15.0, 15.0, 10.0])
Q0 = np.array([0.0, -0.3, 0.0, 0.8, 0.0, 0.6, 0.0])


class PinocchioLaws:
    """The same control laws on Pinocchio (nominal URDF; springs by the plant's own formula)."""

    def __init__(self, model, urdf, reference):
        from oracles import PinocchioOracle

        self.oracle = PinocchioOracle(model, urdf)
        self.pin = self.oracle.pin
        self.springs = MujocoPlant(model, urdf, noise=None)
        self.reference = reference

    def gravity(self, t, q, qd):
        o = self.oracle
        return o.sel(self.pin.computeGeneralizedGravity(o.model, o.data, o.q(q))) - self.springs.spring_torques(q)

    def impedance(self, t, q, qd):
        o = self.oracle
        q_d, qd_d, qdd_d = self.reference(t)
        model_term = o.sel(self.pin.rnea(o.model, o.data, o.q(q), o.v(qd), o.v(qdd_d))) - self.springs.spring_torques(q)
        return STIFFNESS * (q_d - q) + 0.1 * STIFFNESS * (qd_d - qd) + model_term


def time_both(fn, repeats, warmup=200):
    """Per-call wall times and CPU (thread) times [s]: the CPU time excludes preemption."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        c1, w1 = time.thread_time(), time.perf_counter()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
    return wall, cpu


def _cycle(law, safety, state):
    """One control cycle: law then safety filter (returns a callable for time_call)."""
    q, qd = state
    clock = [0.0]

    def run():
        clock[0] += 1e-3
        safety.filter(clock[0], law(clock[0], q, qd), q, qd)

    return run


def _latency_rows(model, urdf):
    reference = MinimumJerkMove(Q0, Q0 + 0.2, 0.0, 1e9)
    tmap = build_torque_map(make_simulator(model, 0.01, kind="rigid"), TorqueMapGrid())  # the lookup cost is the same for PBD maps
    laws = {
        "gravity compensation": GravityCompensation(model).compute,
        "impedance, analytic model term": JointImpedanceController(model, STIFFNESS, STIFFNESS / 10, reference).compute,
        "impedance, torque-map model term": JointImpedanceController(
            model, STIFFNESS, STIFFNESS / 10, reference, model_term="map", torque_map=tmap
        ).compute,
    }
    peer = PinocchioLaws(model, urdf, reference)
    peers = {"gravity compensation": peer.gravity, "impedance, analytic model term": peer.impedance}
    state = (Q0 + 0.01, np.full(7, 0.05))
    rows, cycles = [], {}
    for name, law in laws.items():
        safety = SafetyLayer(model, SafetyConfig(output="baxter", torque_rate_limit=1e6))
        wall, cpu = time_both(_cycle(law, safety, state), CYCLES)
        law_only = time_call(lambda: law(0.0, *state), repeats=CYCLES, warmup=200)
        cycles[name] = (wall, cpu)
        row = [name, _us(median(wall)), _us(percentile(wall, 99)), _us(percentile(cpu, 99)), _us(median(law_only))]
        if name in peers:
            pin_law = time_call(lambda: peers[name](0.0, *state), repeats=CYCLES, warmup=200)
            pin_wall, pin_cpu = time_both(_cycle(peers[name], SafetyLayer(model), state), CYCLES)
            row += [_us(median(pin_law)), _us(median(pin_wall)), _us(percentile(pin_wall, 99)), _us(percentile(pin_cpu, 99))]
            row += [f"{median(law_only) / median(pin_law):.1f}x"]
        else:
            row += ["—"] * 5
        rows.append(row)
    safety = SafetyLayer(model)
    filter_only = time_call(lambda: safety.filter(0.0, np.ones(7), *state), repeats=CYCLES, warmup=200)
    rng = np.random.default_rng(0)
    keys = (rng.uniform(-0.006, 0.006, 7), rng.uniform(-0.5, 0.5, 7), tmap.inertia_axis.mean(1))
    lookup = time_call(lambda: tmap.lookup(*keys), repeats=CYCLES, warmup=200)
    return rows, cycles, filter_only, lookup, tmap


def _mpc_rows(model):
    goal = Q0.copy()
    goal[0], goal[1] = 0.2, -0.45
    rows, rates = [], {}
    # The torch reference (autograd Jacobians), then what make_mpc ships (the compiled solver).
    variants = [("torch", "rigid", init, 1, 1) for init in ("zero", "previous", "gravity")]
    variants += [("torch", "rigid", "previous", 3, 1), ("torch", "rigid", "previous", 1, 5), ("torch", "rigid", "previous", 1, 10)]
    variants += [("torch", "pbd", "previous", 1, 1), ("torch", "pbd", "previous", 1, 10)]
    variants += [("shipped", "rigid", "previous", 1, 1), ("shipped", "pbd", "previous", 1, 1)]
    plant = make_simulator(model, 0.01, kind="rigid")
    for engine, kind, init, iterations, every in variants:
        factory = ModelPredictiveController if engine == "torch" else make_mpc
        mpc = factory(
            make_simulator(model, 0.01, substeps=1, kind=kind),
            MinimumJerkMove(Q0, goal, 0.0, 0.5),
            MPCSettings(initialization=init, max_iterations=iterations, jacobian_every=every),
        )
        q, qd = torch.tensor(Q0), torch.zeros(7, dtype=torch.float64)
        seconds, cpu, errors = [], [], []
        for k in range(MPC_CALLS):
            c0 = time.thread_time()
            tau = mpc.compute(k * 0.01, q.numpy(), qd.numpy())
            cpu.append(time.thread_time() - c0)
            seconds.append(mpc.last.seconds)
            with torch.no_grad():
                q, qd = plant.joint_step(q, qd, torch.as_tensor(tau))
            errors.append(np.abs(q.numpy() - mpc.reference((k + 1) * 0.01)[0]).max())
        rate, cpu_rate = 1.0 / np.mean(seconds[5:]), 1.0 / np.mean(cpu[5:])
        rates[(engine, kind, init, iterations, every)] = (rate, cpu_rate)
        rows.append([
            type(mpc).__name__, kind, init, str(iterations), str(every), f"{np.mean(seconds[5:]) * 1e3:.1f} ms",
            f"{percentile(seconds[5:], 99) * 1e3:.1f} ms", f"{rate:.1f} Hz", f"{cpu_rate:.1f} Hz", f"{max(errors) * 1e3:.2f} mrad",
        ])
    return rows, rates


def _step_milliseconds(model, kind):
    """Median wall time [ms] of one single-configuration simulator step (no autograd)."""
    sim = make_simulator(model, 0.01, substeps=1, kind=kind)
    q = torch.tensor(Q0)
    with torch.no_grad():
        return median(time_call(lambda: sim.joint_step(q, q * 0, q * 0), repeats=30, warmup=3)) * 1e3


def _us(seconds):
    return f"{seconds * 1e6:.1f} µs"


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, not a run
    torch.set_num_threads(1)  # single-configuration work: intra-op threads only add latency
    config = load_robot_config(share_directory() / "config" / "baxter_left.yaml")
    model = config.build_model()
    load = os.getloadavg()[0]
    rows, cycles, filter_only, lookup, tmap = _latency_rows(model, config.urdf)
    mpc_rows, rates = _mpc_rows(model)
    step_ms = {kind: _step_milliseconds(model, kind) for kind in ("rigid", "pbd")}
    worst_p99 = max(percentile(wall, 99) for wall, _ in cycles.values()) * 1e6
    worst_cpu_p99 = max(percentile(cpu, 99) for _, cpu in cycles.values()) * 1e6
    shipped_rate, shipped_cpu = rates[("shipped", "rigid", "previous", 1, 1)]
    default_rate, default_cpu = rates[("torch", "rigid", "previous", 1, 1)]
    body = "\n".join([
        "## Control loop vs Pinocchio (Baxter left arm, 7 joints, float64)",
        "",
        f"Measured {machine_line()}, torch set to 1 thread, load average {load:.1f} during the run "
        "(the 2 cores are shared; p99 suffers from preemption). `python -m benchmarks.bench_control`.",
        "",
        "Control cycle = control law + SafetyLayer.filter, single configuration, numpy/numba path "
        f"({CYCLES} cycles; wall clock unless marked CPU). The Pinocchio columns compute the same law with Pinocchio's gravity/RNEA "
        "and the same spring formula; ratio = our law's median / Pinocchio's.",
        "",
        markdown_table(
            [
                "law", "cycle p50", "cycle p99", "cycle p99 (CPU)", "law only p50",
                "Pinocchio law p50", "Pinocchio cycle p50", "Pinocchio cycle p99", "Pinocchio cycle p99 (CPU)", "ratio (law)",
            ],
            rows,
        ),
        "",
        f"- SafetyLayer.filter alone: p50 {_us(median(filter_only))}, p99 {_us(percentile(filter_only, 99))}.",
        f"- Torque-map lookup (7 joints, trilinear, {tmap.grid.angle_points}x{tmap.grid.velocity_points}x"
        f"{tmap.grid.inertia_contexts} grid): p50 {_us(median(lookup))}, p99 {_us(percentile(lookup, 99))}; "
        f"building that map took {tmap.build_seconds:.1f} s ({tmap.simulator}).",
        f"- Target control-cycle p99 < {TARGET_CYCLE_P99_US:.0f} µs: worst wall-clock p99 **{worst_p99:.0f} µs** "
        f"({'met' if worst_p99 < TARGET_CYCLE_P99_US else 'NOT met'}), worst CPU-time p99 **{worst_cpu_p99:.0f} µs** "
        f"({'met' if worst_cpu_p99 < TARGET_CYCLE_P99_US else 'NOT met'}). The CPU time (thread clock) excludes the "
        "time the process waits while other processes run; on this shared, overloaded 2-core machine a call that is "
        "preempted waits a whole scheduler slice (~2-4 ms), which is what a wall-clock p99 above ~100 µs shows.",
        "",
        "### MPC step rate (horizon 3, dt = 0.01 s, one simulator substep)",
        "",
        f"Tracking a 0.45 rad move in closed loop on the rigid-body simulator, {MPC_CALLS} calls (first 5 excluded); "
        "the MPC predicts with the rigid-body (`rigid`) or the PBD (`pbd`, 1 substep, direct solver) simulator. "
        "`jacobian every` = refresh the torch reference's autograd rollout Jacobian on every N-th call (level-B real-time "
        "iteration); `FastModelPredictiveController` / `FastPBDModelPredictiveController`: what `make_mpc` ships for these "
        "simulators (compiled, exact Jacobians every call).",
        "",
        markdown_table(
            ["controller", "simulator", "initialization", "max iterations", "jacobian every", "mean", "p99", "rate", "rate (CPU time)", "max tracking error"],
            mpc_rows,
        ),
        "",
        f"- Target >= {TARGET_MPC_HZ:.0f} Hz: exact Gauss-Newton every call (rigid, previous, 1 iteration) by the MPC "
        f"`make_mpc` ships (the compiled Riccati solver) **{shipped_rate:.0f} Hz** wall / {shipped_cpu:.0f} Hz CPU "
        f"({'met' if shipped_rate >= TARGET_MPC_HZ else 'NOT met'}); by the torch reference **{default_rate:.0f} Hz** wall / "
        f"{default_cpu:.0f} Hz CPU (the rates vary by 2x between runs with the other load on this shared machine). One "
        f"torch step of the simulator costs {step_ms['rigid']:.1f} ms (rigid) / {step_ms['pbd']:.1f} ms (PBD, one substep) "
        "single-threaded in this run, a 3-step rollout three times that, and the Jacobian (one batched reverse pass over "
        "42 copies) about three rollouts: the torch reference is bounded by torch's per-operation overhead. "
        "Reusing its Jacobian for 10 calls leaves the tracking error unchanged (table). The compiled solver against "
        "Crocoddyl: section mpc.",
    ])
    write_section("control", body)
    print(body)


if __name__ == "__main__":
    main()

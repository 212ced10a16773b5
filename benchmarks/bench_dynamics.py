"""Rigid-body dynamics speed against Pinocchio, measured in the same run (issue #2).

Single configuration (latency: what a control loop pays) and 4096 configurations
(throughput: what identification pays). Run: ``.venv/bin/python -m benchmarks.bench_dynamics``.
"""

import argparse

import numpy as np
import torch

from benchmarks.common import machine_line, markdown_table, median, percentile, time_call, write_section
from diffsim_ros import dynamics as dyn
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.model import load_robot_config
from diffsim_ros.resources import share_directory

BATCH = 4096
TARGET_BATCHED_RNEA_MS = 20.0
TARGET_SINGLE_GRAVITY_US = 50.0


def _pinocchio(model):
    import pinocchio as pin

    from oracles import PinocchioOracle

    return pin, PinocchioOracle(model, share_directory() / "urdf" / "baxter.urdf")


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, not a run
    model = load_robot_config(share_directory() / "config" / "baxter_left.yaml").build_model()
    fast = FastDynamics.from_model(model)
    pin, oracle = _pinocchio(model)
    pm, pd = oracle.model, oracle.data
    rng = np.random.default_rng(0)
    q, qd, qdd = rng.uniform(-1, 1, (3, model.nq))
    pq, pv, pa = oracle.q(q), oracle.v(qd), oracle.v(qdd)
    tq, tqd, tqdd = (torch.tensor(x) for x in (q, qd, qdd))
    fast.gravity_torques(q)  # compile (or load the numba cache) outside the timing
    fast.rnea(q, qd, qdd)

    single = {
        "gravity": {
            "diffsim_ros fast (numba)": time_call(lambda: fast.gravity_torques(q), repeats=2000, warmup=50),
            "diffsim_ros torch": time_call(lambda: dyn.gravity_torques(model, tq), repeats=300, warmup=20),
            "Pinocchio": time_call(lambda: pin.computeGeneralizedGravity(pm, pd, pq), repeats=2000, warmup=50),
        },
        "rnea": {
            "diffsim_ros fast (numba)": time_call(lambda: fast.rnea(q, qd, qdd), repeats=2000, warmup=50),
            "diffsim_ros torch": time_call(lambda: dyn.rnea(model, tq, tqd, tqdd), repeats=300, warmup=20),
            "Pinocchio": time_call(lambda: pin.rnea(pm, pd, pq, pv, pa), repeats=2000, warmup=50),
        },
    }
    bq, bqd, bqdd = (torch.tensor(rng.uniform(-1, 1, (BATCH, model.nq))) for _ in range(3))
    pin_q = [oracle.q(x) for x in bq.numpy()]
    pin_v = [oracle.v(x) for x in bqd.numpy()]
    pin_a = [oracle.v(x) for x in bqdd.numpy()]

    def pin_batch_rnea():
        for a, b, c in zip(pin_q, pin_v, pin_a):
            pin.rnea(pm, pd, a, b, c)

    def pin_batch_gravity():
        for a in pin_q:
            pin.computeGeneralizedGravity(pm, pd, a)

    batched = {
        "gravity": {
            "diffsim_ros torch": time_call(lambda: dyn.gravity_torques(model, bq), repeats=20, warmup=3),
            "Pinocchio (loop)": time_call(pin_batch_gravity, repeats=10, warmup=2),
        },
        "rnea": {
            "diffsim_ros torch": time_call(lambda: dyn.rnea(model, bq, bqd, bqdd), repeats=20, warmup=3),
            "Pinocchio (loop)": time_call(pin_batch_rnea, repeats=10, warmup=2),
        },
    }

    rows = []
    for algo, impls in single.items():
        peer = median(impls["Pinocchio"])
        for impl, samples in impls.items():
            rows.append([f"{algo}, 1 config", impl, f"{median(samples) * 1e6:.1f} µs", f"{percentile(samples, 99) * 1e6:.1f} µs", f"{median(samples) / peer:.1f}x"])
    for algo, impls in batched.items():
        peer = median(impls["Pinocchio (loop)"])
        for impl, samples in impls.items():
            rows.append([f"{algo}, {BATCH} configs", impl, f"{median(samples) * 1e3:.2f} ms", f"{percentile(samples, 99) * 1e3:.2f} ms", f"{median(samples) / peer:.2f}x"])
    rnea_ms = median(batched["rnea"]["diffsim_ros torch"]) * 1e3
    grav_us = median(single["gravity"]["diffsim_ros fast (numba)"]) * 1e6
    body = "\n".join([
        "## Rigid-body dynamics vs Pinocchio (Baxter left arm, 7 joints, float64)",
        "",
        f"Measured {machine_line()}. `python -m benchmarks.bench_dynamics`. Ratio = median / Pinocchio's median in the same run.",
        "",
        markdown_table(["algorithm", "implementation", "median", "p99", "ratio to Pinocchio"], rows),
        "",
        f"- Target batched RNEA of {BATCH} configurations < {TARGET_BATCHED_RNEA_MS:.0f} ms: **{rnea_ms:.2f} ms** "
        f"({'met' if rnea_ms < TARGET_BATCHED_RNEA_MS else 'NOT met'}).",
        f"- Target single-configuration gravity < {TARGET_SINGLE_GRAVITY_US:.0f} µs: **{grav_us:.1f} µs** with the numba path "
        f"({'met' if grav_us < TARGET_SINGLE_GRAVITY_US else 'NOT met'}); the torch path is for batches and gradients.",
    ])
    write_section("dynamics", body)
    print(body)


if __name__ == "__main__":
    main()

"""Identification from motion alone on recordings this package did not shape (issue 13).

Recordings (``test/motion_recordings.py``): a MuJoCo Baxter arm (RK4 at 1 ms) with a hidden
payload, shoulder spring, damping and (on some truths) stiff Coulomb friction, driven by
computed torque on a nominal MuJoCo model plus PD at 1 kHz along a 5-harmonic multi-sine
(0.1-0.5 Hz) that never rests; joint states (efforts with noise, shuffled names) and
Float64MultiArray commands at 100 Hz, camera poses at 30 Hz, written with rosbags; the same
bags decimated to 10 Hz. For every truth, rate and model (rigid, PBD), the package's
calibration (the code behind ``diffsim-ros calibrate``) is compared with the truth, with the
issue's targets, and with a plain Pinocchio inverse-dynamics regression on the same bag
(``test/regression_baseline.py``). A second part times 60 s of 100 Hz motion.

Run: ``.venv/bin/python -m benchmarks.bench_identification [--seeds 3] [--parts accuracy,speed]``.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import machine_line, markdown_table, write_section
from diffsim_ros.pipelines.calibration import calibrate_bag
from diffsim_ros.model import load_robot_config

GROUPS = ("payload", "spring", "damping", "friction")
TARGETS = {"mass": 2.0, "com": 5.0, "k": 1.0, "offset": 0.5, "damping": 10.0, "friction": 10.0}
UNITS = {"mass": "%", "com": "mm", "k": "%", "offset": "deg", "damping": "% worst", "friction": "% worst"}


def _errors(values, truth, friction):
    """Errors in the units of TARGETS (NaN where a parameter was not determined)."""
    from motion_recordings import ARM

    get = lambda name: values.get(name)  # noqa: E731
    out = {
        "mass": 100 * abs(get("payload.mass") / truth.payload_mass - 1) if get("payload.mass") is not None else np.nan,
        "com": 1e3 * np.linalg.norm(get("payload.com") - np.array(truth.payload_com)) if get("payload.com") is not None else np.nan,
        "k": 100 * abs(get("left_s1.spring.stiffness") / truth.stiffness - 1) if get("left_s1.spring.stiffness") is not None else np.nan,
        "offset": np.degrees(abs(get("left_s1.spring.offset") - truth.offset)) if get("left_s1.spring.offset") is not None else np.nan,
    }
    damping = [values.get(f"{j}.damping", np.nan) for j in ARM]
    out["damping"] = 100 * np.max(np.abs(np.array(damping, float) / np.array(truth.damping) - 1))
    if friction:
        mu = [values.get(f"{j}.friction", np.nan) for j in ARM]
        out["friction"] = 100 * np.max(np.abs(np.array(mu, float) / np.array(truth.friction) - 1))
    else:
        out["friction"] = np.nan
    return out


def _baseline_values(estimate):
    from motion_recordings import ARM

    values = {"payload.mass": estimate.payload_mass, "payload.com": estimate.payload_com,
              "left_s1.spring.stiffness": estimate.stiffness, "left_s1.spring.offset": estimate.offset}
    values.update({f"{j}.damping": d for j, d in zip(ARM, estimate.damping)})
    if estimate.friction is not None:
        values.update({f"{j}.friction": m for j, m in zip(ARM, estimate.friction)})
    return values


def _cells(errors):
    return [("n/d" if np.isnan(errors[k]) else f"{errors[k]:.2f}") for k in TARGETS]


def _met(errors, friction):
    return all((not np.isnan(errors[k])) and errors[k] <= TARGETS[k] for k in TARGETS if k != "friction" or friction)


def accuracy(seeds, workdir):
    """Rows: truth, rate, method, errors, targets met, seconds."""
    from motion_recordings import record_motion_bag, write_robot_config
    from regression_baseline import regression_baseline

    config = load_robot_config(write_robot_config(workdir / "robot.yaml"))
    rows, failures = [], []
    for seed in seeds:
        friction = seed % 2 == 1
        for rate in (100.0, 10.0):
            bag, truth, _ = record_motion_bag(workdir / f"bag_{seed}_{int(rate)}", seed, friction=friction,
                                              rate=None if rate == 100.0 else rate)
            start = time.perf_counter()
            base = _errors(_baseline_values(regression_baseline(bag, friction=True)), truth, friction)
            rows.append([seed, f"{rate:g} Hz", "Pinocchio regression", *_cells(base), "yes" if _met(base, friction) else "no",
                         f"{time.perf_counter() - start:.1f}"])
            for kind in ("rigid", "pbd"):
                start = time.perf_counter()
                run = calibrate_bag(bag, config, GROUPS, model_kind=kind)
                seconds = time.perf_counter() - start
                errors = _errors(run.calibration.parameters, truth, friction)
                met = _met(errors, friction) and not run.undetermined
                if not met:
                    failures.append((seed, rate, kind, errors, dict(run.undetermined)))
                rows.append([seed, f"{rate:g} Hz", f"diffsim_ros {kind}", *_cells(errors), "yes" if met else "no",
                             f"{seconds:.1f}"])
                print(rows[-1], flush=True)
    return rows, failures


def speed(workdir):
    """Seconds to calibrate 60 s of 100 Hz motion (payload, spring, damping, friction)."""
    from motion_recordings import MotionSpec, record_motion_bag, write_robot_config

    config = load_robot_config(write_robot_config(workdir / "robot.yaml"))
    bag, truth, _ = record_motion_bag(workdir / "bag_60s", 5, friction=True, spec=MotionSpec(duration=60.0))
    rows = []
    for kind, target in (("rigid", 30.0), ("pbd", 180.0)):
        calibrate_bag(bag, config, GROUPS, model_kind=kind)  # warm-up: numba kernels compile once
        start = time.perf_counter()
        evaluations = []
        run = calibrate_bag(bag, config, GROUPS, model_kind=kind, progress=evaluations.append)
        seconds = time.perf_counter() - start
        errors = _errors(run.calibration.parameters, truth, True)
        rows.append([kind, f"{seconds:.1f}", f"{target:g}", "yes" if seconds <= target else "no", len(evaluations),
                     *_cells(errors)])
        print(rows[-1], flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--parts", default="accuracy,speed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    parts = set(args.parts.split(","))
    header = ["quantity"] + [f"{k} [{UNITS[k]}]" for k in TARGETS]
    lines = [f"Measured {machine_line()}; `python -m benchmarks.bench_identification --parts {args.parts}`.",
             "", "Targets: " + ", ".join(f"{k} {v:g} {UNITS[k]}" for k, v in TARGETS.items()) + "."]
    with tempfile.TemporaryDirectory() as tmp:
        if "accuracy" in parts:
            rows, failures = accuracy(range(args.seeds), Path(tmp))
            lines += ["", "### Accuracy: 20 s of motion alone, no rest poses (n/d: reported as not determined)", "",
                      markdown_table(["truth", "rate", "method", *header[1:], "targets met", "s"], rows)]
            if failures:
                lines += ["", "Missed: " + "; ".join(f"truth {s} {r:g} Hz {k}: {e} undetermined {list(u)}"
                                                    for s, r, k, e, u in failures)]
        if "speed" in parts:
            rows = speed(Path(tmp))
            lines += ["", "### Speed: 60 s of 100 Hz motion, payload + spring + damping + friction (1 thread)", "",
                      markdown_table(["model", "seconds", "target s", "met", "evaluations", *header[1:]], rows)]
    write_section("identification-from-motion", "## Identification from motion (issue 13)\n\n" + "\n".join(lines))


if __name__ == "__main__":
    main()

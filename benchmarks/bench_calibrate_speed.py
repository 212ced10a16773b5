"""``diffsim-ros calibrate`` against a plain Pinocchio regression, each a process, on the same bags (issue 44).

For every bag, back to back: the command a user runs (``diffsim-ros calibrate --estimate
payload,spring,damping,friction``, writing calibration.yaml, the URDF and report.png) and
the afternoon baseline of ``test/regression_baseline.py`` (rosbags, scipy's Savitzky-Golay,
Pinocchio's joint-torque regressor, least squares) as its own ``python`` process. Each
process is timed from its start to its exit: CPU (user + system, of the process and its
children), wall time and peak RSS, from ``os.wait4``; the accuracy against the truth the
bag was simulated with. Optionally a busy-loop hog per core runs beside both (``--busy``).

Bags: ``test/motion_recordings.py`` (MuJoCo Baxter, computed torque plus PD at 1 kHz, 100 Hz
joint states and commands), seeds 5-7 with friction, 20 s.

Run: ``.venv/bin/python -m benchmarks.bench_calibrate_speed [--seeds 5,6,7] [--busy]``.
"""

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.common import cpu_hogs, machine_line, markdown_table, median, run_timed, write_section

REPO = Path(__file__).resolve().parents[1]
TEST = REPO / "test"
GROUPS = "payload,spring,damping,friction"

_BASELINE = """
import json, sys
sys.path.insert(0, {test!r})
from regression_baseline import regression_baseline
from pathlib import Path
e = regression_baseline(Path(sys.argv[1]), friction=True)
print(json.dumps({{"mass": e.payload_mass, "k": e.stiffness, "damping": list(e.damping)}}))
"""


def _timed(argv):
    """CPU [s], wall [s], peak RSS [MiB] and stdout of ``argv`` (:func:`benchmarks.common.run_timed`); raises if it fails."""
    report = run_timed(argv)
    if report["status"] != 0:
        raise RuntimeError(f"{argv[:3]} failed ({report['status']}): {report['err'][-800:]}")
    return report


def _calibrated(out_dir):
    import yaml
    from motion_recordings import ARM

    values = yaml.safe_load((out_dir / "calibration.yaml").read_text())["parameters"]
    damping = [values[f"{joint}.damping"] for joint in ARM]
    return {"mass": values["payload.mass"], "k": values["left_s1.spring.stiffness"], "damping": damping}


def _errors(values, truth):
    mass = abs(values["mass"] - truth.payload_mass) / truth.payload_mass * 100
    k = abs(values["k"] - truth.stiffness) / truth.stiffness * 100
    damping = max(abs(a - b) / b * 100 for a, b in zip(values["damping"], truth.damping))
    return f"{mass:.2f} / {k:.3f} / {damping:.2f}"


def bench_bag(seed, workdir, threads):
    """Rows for one bag: calibrate (default threads and, if asked, --threads given) and the baseline."""
    sys.path.insert(0, str(TEST))
    from motion_recordings import record_motion_bag, write_robot_config

    config = write_robot_config(workdir / "robot.yaml")
    bag, truth, _ = record_motion_bag(workdir / f"bag_{seed}", seed, friction=True)
    rows = []
    out = workdir / f"out_{seed}"
    command = [str(Path(sys.executable).parent / "diffsim-ros"), "calibrate", "--bag", str(bag), "--config", str(config),
               "--out", str(out), "--estimate", GROUPS, "--force"] + (["--threads", str(threads)] if threads else [])
    ours = _timed(command)
    baseline = _timed([sys.executable, "-c", _BASELINE.format(test=str(TEST)), str(bag)])
    ours_values, base_values = _calibrated(out), json.loads(baseline["out"].strip().splitlines()[-1])
    for name, report, values in (("diffsim-ros calibrate", ours, ours_values), ("Pinocchio regression", baseline, base_values)):
        rows.append([seed, name, f"{report['cpu']:.2f}", f"{report['wall']:.2f}", f"{report['rss']:.0f}",
                     _errors(values, truth)])
    rows.append([seed, "ratio (ours / baseline)", f"{ours['cpu'] / baseline['cpu']:.2f}",
                 f"{ours['wall'] / baseline['wall']:.2f}", f"{ours['rss'] / baseline['rss']:.2f}", ""])
    return rows, ours["cpu"] / baseline["cpu"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="5,6,7", help="motion_recordings seeds (comma-separated)")
    parser.add_argument("--busy", action="store_true", help="one busy-loop process per core beside both")
    parser.add_argument("--threads", type=int, default=None, help="pass --threads to calibrate (default: its own)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows, ratios = [], []
    start_load = os.getloadavg()[0]
    with cpu_hogs(3600 if args.busy else 0), tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            bag_rows, ratio = bench_bag(seed, Path(tmp), args.threads)
            rows += bag_rows
            ratios.append(ratio)
            print("\n".join(" | ".join(map(str, r)) for r in bag_rows), flush=True)
    load = ("with a busy loop on every core" if args.busy else "no load started by the benchmark") + \
        f", load average {start_load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
    body = "\n".join([
        "## calibrate against a Pinocchio regression, whole processes (issue 44)", "",
        f"Measured {machine_line()} (the benchmark's own; calibrate ran with its defaults), {load}; `python -m benchmarks.bench_calibrate_speed --seeds {args.seeds}"
        f"{' --busy' if args.busy else ''}`.", "",
        "Each process from start to exit (imports, bag reading, fit, outputs: calibrate writes calibration.yaml, "
        "the URDF and report.png). Errors: payload mass % / spring k % / worst damping %. "
        f"Median CPU ratio {median(ratios):.2f} (target <= 1).", "",
        markdown_table(["seed", "tool", "CPU s", "wall s", "peak RSS MiB", "errors"], rows)])
    write_section("calibrate-speed" + ("-busy" if args.busy else ""), body)


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()

"""``diffsim-ros calibrate`` on long bags: CPU and peak memory against the bag's length (issue 44, scale).

Bags of the same independent MuJoCo generator as :mod:`benchmarks.bench_calibrate_speed`
(``test/motion_recordings.py``: computed-torque control at 1 kHz, 100 Hz joint states, hidden
payload, spring, damping and friction) of 20 s, 10 minutes and 60 minutes, one seed. Each
``calibrate`` is its own process, timed from start to exit (imports, bag reading, fit, outputs)
with its peak RSS; the bags are written first, untimed.

Targets (issue 44): the 10-minute bag in <= 30x the 20 s bag's CPU; the 60-minute bag in
<= 1.5 GB peak RSS; the same accuracy as on the 20 s bag.

Run: ``python -m benchmarks.bench_calibrate_scale [--durations 20,600,3600] [--seed 5] [--workdir DIR]``
(about 15 minutes of CPU for the three; writes the ``calibrate-scale`` section of RESULTS.md).
"""

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_calibrate_speed import GROUPS, TEST, _calibrated, _errors
from benchmarks.common import machine_line, markdown_table, run_timed, write_section

__all__ = ["main", "bench_duration"]

RSS_TARGET_MIB = 1.5 * 1024  # [MiB] the 60-minute bag
CPU_RATIO_TARGET = 30.0  # the 10-minute bag against the 20 s bag


def _bag(workdir, seed, duration):
    """The bag of ``duration`` seconds (``motion_recordings.record_motion_bag``), written unless ``workdir``
    holds it from an earlier run (the generator is deterministic); returns (bag, truth, seconds it took)."""
    sys.path.insert(0, str(TEST))
    from motion_recordings import MotionSpec, random_truth, record_motion_bag

    start = time.perf_counter()
    bag = workdir / f"bag_{int(duration)}s_seed{seed}"
    if bag.exists():
        truth = random_truth(seed, True)
    else:
        _, truth, _ = record_motion_bag(bag, seed, friction=True, spec=replace(MotionSpec(), duration=float(duration)))
    return bag, truth, time.perf_counter() - start


def bench_duration(workdir, seed, duration, config):
    """One row: calibrate on a bag of ``duration`` seconds."""
    bag, truth, generated = _bag(workdir, seed, duration)
    out = workdir / f"out_{int(duration)}s"
    command = [str(Path(sys.executable).parent / "diffsim-ros"), "calibrate", "--bag", str(bag), "--config", str(config),
               "--out", str(out), "--estimate", GROUPS, "--force"]
    report = run_timed(command)
    if report["status"] != 0:
        errors = f"exit {report['status']}: {report['err'].strip().splitlines()[-1:] or ''}"
    else:
        errors = _errors(_calibrated(out), truth)
    size = sum(f.stat().st_size for f in Path(bag).rglob("*") if f.is_file()) / 2**20
    print(f"{duration} s: generated in {generated:.0f} s, bag {size:.0f} MiB, calibrate {report['cpu']:.1f} s CPU, "
          f"{report['wall']:.1f} s wall, {report['rss']:.0f} MiB, {errors}", flush=True)
    return {"duration": duration, "cpu": report["cpu"], "wall": report["wall"], "rss": report["rss"], "errors": errors,
            "bag_mib": size, "status": report["status"]}


def _verdicts(rows):
    by = {r["duration"]: r for r in rows}
    out = []
    if 20 in by and 600 in by:
        ratio = by[600]["cpu"] / by[20]["cpu"]
        out.append(f"10-minute bag: {ratio:.1f}x the 20 s bag's CPU (target <= {CPU_RATIO_TARGET:.0f}x: "
                   f"{'met' if ratio <= CPU_RATIO_TARGET and by[600]['status'] == 0 else 'not met'}).")
    if 3600 in by:
        rss = by[3600]["rss"]
        met = rss <= RSS_TARGET_MIB and by[3600]["status"] == 0
        out.append(f"60-minute bag: peak RSS {rss:.0f} MiB (target <= {RSS_TARGET_MIB:.0f} MiB: {'met' if met else 'not met'}).")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--durations", default="20,600,3600", help="bag lengths [s], comma-separated")
    parser.add_argument("--seed", type=int, default=5, help="motion_recordings seed")
    parser.add_argument("--workdir", help="keep the bags here and reuse them (default: a temporary directory)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(TEST))
    from motion_recordings import write_robot_config

    durations = [int(d) for d in args.durations.split(",")]
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        config = write_robot_config(workdir / "robot.yaml")
        rows = [bench_duration(workdir, args.seed, d, config) for d in durations]
    table = [[r["duration"], f"{r['bag_mib']:.0f}", f"{r['cpu']:.1f}", f"{r['wall']:.1f}", f"{r['rss']:.0f}", r["errors"]]
             for r in rows]
    body = "\n".join([
        "## calibrate on long bags: CPU and peak memory against the bag's length (issue 44, scale)", "",
        f"Measured {machine_line()}; load average {start_load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end; "
        f"`python -m benchmarks.bench_calibrate_scale --durations {args.durations} --seed {args.seed}`.", "",
        f"`diffsim-ros calibrate --estimate {GROUPS}` (defaults otherwise), each its own process from start to exit; "
        "bags of bench_calibrate_speed's generator at 100 Hz. Errors: payload mass % / spring k % / worst damping %.", "",
        markdown_table(["bag [s]", "bag [MiB]", "CPU s", "wall s", "peak RSS MiB", "errors"], table), "",
        *_verdicts(rows)])
    write_section("calibrate-scale", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the streaming estimator's CPU goes, per refresh (issue 45's 10 % of a core at 10 Hz).

``python -m benchmarks.bench_streaming_parts [--seconds 30]``

The independent MuJoCo plant (test/motion_recordings.py) moves for ``--seconds`` with a payload
step half way; its samples are fed to the streaming estimator (refresh 0.1 s) while the thread
CPU time of every part of an update is summed: the incremental filter (and in it the
torques' kernel), the regression rows (and in them the joint-torque regressor and the lever
spring's columns), the change test and the fit on the statistics. Peer in the same run: the
joint-torque regressor alone on the same number of samples per call. Writes the
``online-streaming-parts`` section of RESULTS.md.
"""

import argparse
import collections
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.common import command_line, machine_line, markdown_table, write_section

PARTS = (("filter", "motion_filter", "StreamingMotionFilter", "emit"),
         ("  of it: torque kernel", "motion_filter", "StreamingMotionFilter", "_torques"),
         ("regression rows", "torque_regression", "TorqueRegression", "rows"),
         ("  of it: joint-torque regressor (compiled)", "torque_regression", None, "regressor_array"),
         ("  of it: lever spring columns", "torque_regression", "TorqueRegression", "_lever_columns"),
         ("change test", "change_detection", "ChangeDetector", "test"),
         ("fit on the statistics", "streaming", None, "fit_statistics"))


def _instrument(totals):
    """Wrap every part so that its thread CPU time adds up in ``totals`` (name -> seconds)."""
    import importlib

    for name, module, owner, attribute in PARTS:
        target = importlib.import_module(f"diffsim_ros.estimation.{module}")
        target = getattr(target, owner) if owner else target
        inner = getattr(target, attribute)

        def timed(*args, _inner=inner, _name=name, **kwargs):
            start = time.thread_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                totals[_name] += time.thread_time() - start

        setattr(target, attribute, timed)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_streaming_parts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--no-write", action="store_true", help="print only; RESULTS.md untouched")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
    from diffsim_ros.threads import limit_native_threads

    limit_native_threads()
    import torch

    torch.set_num_threads(1)  # benchmarks.common may have loaded torch before the limit
    from benchmarks.bench_online_soak import feed
    from diffsim_ros.dynamics.regressor import joint_torque_regressor
    from diffsim_ros.model import load_robot_config
    from motion_recordings import MotionSpec, random_truth, simulate
    from oracles import BAXTER_LEFT

    streams = simulate(replace(random_truth(0), payload_mass=1.0),
                       MotionSpec(duration=args.seconds, camera_rate=0.0, payload_step=(args.seconds / 2, 1.9)))
    model = load_robot_config(BAXTER_LEFT).build_model()
    q = torch.as_tensor(streams.q[:10])
    with torch.inference_mode():  # the compiled regressor loaded from the cache first, as a node's warm-up does
        joint_torque_regressor(model, q, q, q)
    totals = collections.defaultdict(float)
    _instrument(totals)
    load = os.getloadavg()[0]
    estimator = feed(streams)
    updates = [u for u in estimator.updates]
    per = 1e3 / len(updates)
    total = sum(u.cpu_seconds for u in updates)
    peer = []
    with torch.inference_mode():
        for _ in range(50):
            start = time.thread_time()
            joint_torque_regressor(model, q, q, q)
            peer.append(time.thread_time() - start)
    rows = [["whole update", f"{total * per:.2f}", f"{100 * total / args.seconds:.1f}"]]
    rows += [[name, f"{totals[name] * per:.2f}", f"{100 * totals[name] / args.seconds:.1f}"] for name, *_ in PARTS]
    rows.append(["peer: joint_torque_regressor alone, 10 samples (median of 50)", f"{1e3 * np.median(peer):.2f}",
                 f"{100 * 10 * np.median(peer):.1f} at 10 calls/s"])
    command = command_line("bench_streaming_parts", argv)
    body = "\n".join([
        "### Streaming estimator: CPU per refresh, by part (issue 45)", "",
        f"Measured {machine_line()}; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        f"(other engineers' runs). `{command.strip()}`: {len(updates)} updates over {args.seconds:g} s of 100 Hz "
        "joint states, refresh 0.1 s, the compiled kernels loaded before (as a node's warm-up does). Thread CPU "
        "time; parts nest as indented.", "",
        markdown_table(["part", "ms per update", "% of a core"], rows)])
    print(body)
    if not args.no_write:
        write_section("online-streaming-parts", body)


if __name__ == "__main__":
    main()

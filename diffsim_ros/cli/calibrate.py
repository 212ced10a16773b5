"""``diffsim-ros calibrate``: a recorded ROS 2 bag -> calibrated model, URDF and report.

    diffsim-ros calibrate --bag BAG --config CONFIG --out DIR [--estimate payload,spring,...] [--force]
"""

import sys
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.parameters import GROUPS
from diffsim_ros.io.bags import BagError
from diffsim_ros.io.calibration import CalibrationError, atomic_directory
from diffsim_ros.io.offline import calibrate_bag, write_outputs
from diffsim_ros.model import RobotModelError, load_robot_config

__all__ = ["add_parser", "calibrate_command", "summary_table"]


def add_parser(subparsers):
    """Register the ``calibrate`` subcommand."""
    parser = subparsers.add_parser("calibrate", help="calibrate a robot model from a recorded ROS 2 bag")
    parser.add_argument("--bag", required=True, type=Path, help="rosbag2 directory or .db3/.mcap file")
    parser.add_argument("--config", required=True, type=Path, help="robot config YAML (e.g. config/baxter_left.yaml)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--estimate", default=None,
        help=f"comma-separated parameter groups from {','.join(GROUPS)} (default: what the data supports)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--model", choices=("rigid", "pbd"), default="rigid",
                        help="differentiable model the residuals go through: exact rigid-body dynamics or the PBD simulator")
    parser.add_argument("--trajectory-loss", choices=("inverse_dynamics", "rollout"), default=None,
                        help="loss on trajectories (default: inverse_dynamics for rigid, rollout for pbd)")
    parser.add_argument("--max-iterations", type=int, default=50, help="residual evaluations per optimizer pass")
    parser.add_argument("--window-stride", type=int, default=10,
                        help="samples between rollout windows (rollout loss; larger is faster)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 avoids OpenMP stalls on busy machines)")
    parser.set_defaults(handler=calibrate_command)


def _format(value):
    array = np.atleast_1d(np.asarray(value, dtype=float))
    return ", ".join(f"{v:.6g}" for v in array)


def summary_table(run):
    """Plain-text table: parameter, nominal, estimate, standard deviation."""
    rows = [("parameter", "nominal", "estimate", "stddev")]
    for name, value in run.calibration.parameters.items():
        nominal = "" if name == "camera.pose" else _format(run.nominal.get_parameter(name).detach().cpu().numpy())
        rows.append((name, nominal, _format(value), _format(run.calibration.stddev.get(name, np.nan))))
    for name, reason in run.calibration.unidentifiable.items():
        rows.append((name, "", "not identifiable", reason.split(";")[0]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def calibrate_command(args):
    """Handler: returns the exit code (0 ok, 2 bad input)."""
    torch.set_num_threads(max(1, args.threads))
    groups = None if args.estimate is None else tuple(g.strip() for g in args.estimate.split(",") if g.strip())
    bars = []

    def progress(stage):
        bar = tqdm(total=args.max_iterations * 2, desc=f"calibrate ({stage})", unit="eval", leave=False)
        bars.append(bar)
        return lambda cost: (bar.update(1), bar.set_postfix(cost=f"{cost:.4g}"))

    loss = args.trajectory_loss or ("rollout" if args.model == "pbd" else "inverse_dynamics")
    try:
        atomic_directory(args.out, force=args.force)  # refuse early, before any work
        config = load_robot_config(args.config)
        run = calibrate_bag(args.bag, config, groups, trajectory_loss=loss, model_kind=args.model,
                            progress=progress, max_iterations=args.max_iterations, window_stride=args.window_stride)
        paths = write_outputs(run, args.out, config.urdf, force=args.force)
    except (BagError, DataError, RobotModelError, CalibrationError, FileExistsError, ValueError) as err:
        print(f"diffsim-ros calibrate: error: {err}", file=sys.stderr)
        return 2
    finally:
        for bar in bars:
            bar.close()
    s = run.summary
    print(f"data: {s.static_poses} static poses, {s.trajectory_seconds:.1f} s of trajectory "
          f"({s.torque_source} torques), {s.camera_observations} camera poses")
    for note in s.notes:
        print(f"note: {note}")
    print(summary_table(run))
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    return 0

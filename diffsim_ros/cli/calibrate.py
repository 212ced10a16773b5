"""``diffsim-ros calibrate``: a recorded ROS 2 bag -> calibrated model, URDF and report.

    diffsim-ros calibrate --bag BAG --config CONFIG --out DIR [--estimate payload,spring,...]
        [--start S] [--end S] [--model rigid|pbd] [--torque-source auto|commanded|effort] [--allow-partial] [--force]

Exit codes (:mod:`diffsim_ros.cli.exits`): 0 written; 2 bad input (nothing written); 3 a
requested parameter is not determined by the data (named; nothing written unless
``--allow-partial``, and exit code 3 still), less data than an estimate needs
(``MIN_MOTION_SECONDS`` of motion or ``MIN_REST_POSES`` rest poses, as the online estimator),
or a poor fit: the fitted model does not explain the measured torques (no value is a result;
``--allow-partial`` writes ``diagnostics.yaml`` and ``report.png`` to see why, never a
calibration).
"""

import math
import sys
import time
from pathlib import Path

from diffsim_ros.cli import exits, summary
from diffsim_ros.threads import DEFAULT_THREADS, set_threads
from diffsim_ros.vocabulary import GROUPS, HOLDS, MODELS, TORQUE_SOURCES, TRAJECTORY_LOSSES

# The library (torch, numba, rosbags) is imported by the handler, not here: ``--help`` and
# argument errors answer without loading it (seconds of CPU).

__all__ = ["add_parser", "calibrate_command", "parse_groups", "parse_window", "summary_table"]


def add_parser(subparsers):
    """Register the ``calibrate`` subcommand."""
    parser = subparsers.add_parser("calibrate", help=summary("calibrate"))
    parser.add_argument("--bag", required=True, type=Path, help="rosbag2 directory or .db3/.mcap file")
    parser.add_argument("--config", required=True, type=Path, help="robot config YAML (e.g. config/baxter_left.yaml)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--estimate", default=None,
                        help=f"comma-separated parameter groups from {','.join(GROUPS)} (default: what the data supports)")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--allow-partial", action="store_true",
                        help="write the determined parameters even if some requested ones are not determined "
                             "(those go under 'unidentifiable:'); after a poor fit, write only its diagnostics "
                             "(diagnostics.yaml, report.png), never a calibration; exit code 3 still")
    parser.add_argument("--model", choices=MODELS, default="rigid",
                        help="differentiable model the residuals go through: exact rigid-body dynamics or the PBD simulator")
    parser.add_argument("--trajectory-loss", choices=TRAJECTORY_LOSSES, default="auto",
                        help="loss on motion (auto: inverse dynamics for the rigid model at >= 50 Hz, else rollouts)")
    parser.add_argument("--torque-source", choices=TORQUE_SOURCES, default="auto",
                        help="torques of the motion: commanded (held as the robot held them) or measured efforts "
                             "(auto: commanded when the robot config names topics.commanded_torques, which must then "
                             "be in the bag; effort: the commands may be absent)")
    parser.add_argument("--no-camera", action="store_true",
                        help="the bag was recorded without the camera: do not read the robot config's "
                             "topics.camera_pose (else it must be in the bag unless --estimate names no camera group)")
    parser.add_argument("--torque-hold", choices=("auto",) + HOLDS, default="auto",
                        help="how torques act between samples (auto: commanded held, efforts cubic)")
    parser.add_argument("--order-policy", choices=("raise", "sort"), default="raise",
                        help="out-of-order stamps: refuse the bag (raise) or sort them and drop repeated stamps")
    parser.add_argument("--start", type=float, default=None, metavar="SECONDS",
                        help="use the bag from this time on [s from its first joint state] (default: its start)")
    parser.add_argument("--end", type=float, default=None, metavar="SECONDS",
                        help="use the bag up to this time [s from its first joint state] (default: its end); e.g. "
                             "one segment of a recording in which the payload changed")
    parser.add_argument("--max-iterations", type=int, default=50, help="residual evaluations per optimizer pass")
    parser.add_argument("--window-stride", type=int, default=None,
                        help="samples between rollout windows (rollout loss; larger is faster; default 1 rigid, 2 PBD)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch and numba threads (default %(default)s: threads waiting for a busy core stall "
                             "the fit, so more pay only on an otherwise idle machine)")
    parser.set_defaults(handler=calibrate_command)


def parse_groups(text):
    """Groups of an ``--estimate`` value; ValueError naming unknown or missing ones."""
    tokens = [g.strip() for g in text.split(",")]
    groups = tuple(dict.fromkeys(g for g in tokens if g))
    if not groups:
        raise ValueError(f"--estimate {text!r} names no parameter group; choose from {','.join(GROUPS)}")
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"--estimate: unknown parameter group(s) {unknown}; choose from {','.join(GROUPS)}")
    return groups


def _format(value):
    import numpy as np

    array = np.atleast_1d(np.asarray(value, dtype=float))
    return ", ".join(f"{v:.6g}" for v in array)


def summary_table(run):
    """Plain-text table: parameter, nominal, estimate, standard deviation, status."""
    rows = [("parameter", "nominal", "estimate", "stddev", "status")]
    status = "POOR FIT (not a result)" if run.poor_fit else "determined"
    for name, value in run.calibration.parameters.items():
        nominal = "" if name == "camera.pose" else _format(run.nominal.get_parameter(name).detach().cpu().numpy())
        shown = "in combination (base parameters)" if name in run.calibration.combined and not run.poor_fit else status
        rows.append((name, nominal, _format(value), _format(run.calibration.stddev.get(name, math.nan)), shown))
    for name, reason in run.calibration.unidentifiable.items():
        nominal = "" if name == "camera.pose" else _format(run.nominal.get_parameter(name).detach().cpu().numpy())
        # A poor fit's determination says nothing (its std come from a model that does not fit).
        status = "POOR FIT (not a result)" if run.poor_fit else "NOT DETERMINED: " + reason.split(";")[0]
        rows.append((name, nominal, "-", "-", status))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join([cell.ljust(w) for cell, w in zip(row[:4], widths)] + [row[4]]) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  ------")
    return "\n".join(lines)


def _base_note(run):
    """What the data determine of the link inertials: how many combinations, the strongest few."""
    from diffsim_ros.estimation.base_parameters import expression

    base = run.calibration.base_parameters
    if not base or run.poor_fit:
        return
    linear = {term[1] for record in base for term in record["terms"]}
    print(f"inertia: the motion determines {len(base)} combinations (base parameters) of the link inertials"
          f"{' and armatures' if any(n.endswith('.armature') for n in linear) else ''}, not each link's; "
          f"{len(run.calibration.combined)} parameter(s) above are held at the values nearest the URDF's that "
          "reproduce them (calibration.yaml lists every combination under base_parameters). The most precise:")
    for record in sorted(base, key=lambda r: r["std"] / max(abs(r["value"]), 1e-12))[:5]:
        print(f"  {expression(record['terms'], limit=4)} = {record['value']:.5g} +- {record['std']:.2g}")


def _check_arguments(args):
    """``(groups or None, window or None)``; ValueError naming a bad argument (before the library loads)."""
    groups = None if args.estimate is None else parse_groups(args.estimate)
    if args.window_stride is not None and args.window_stride < 1:
        raise ValueError(f"--window-stride must be >= 1, got {args.window_stride}")
    if args.max_iterations < 1:
        raise ValueError(f"--max-iterations must be >= 1, got {args.max_iterations}")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.model == "pbd" and args.trajectory_loss == "inverse_dynamics":
        raise ValueError("--model pbd needs --trajectory-loss rollout or auto (inverse dynamics is rigid-body only)")
    return groups, parse_window(args)


def _settings(args):
    from diffsim_ros.estimation.identification import IdentificationSettings

    stride = args.window_stride if args.window_stride is not None else (2 if args.model == "pbd" else None)
    return IdentificationSettings(trajectory_loss=args.trajectory_loss, max_iterations=args.max_iterations,
                                  window_stride=stride)


def parse_window(args):
    """``(start, end)`` of ``--start`` / ``--end`` [s], or None for the whole bag."""
    if args.start is None and args.end is None:
        return None
    start = -math.inf if args.start is None else args.start
    end = math.inf if args.end is None else args.end
    if math.isnan(start) or math.isnan(end) or not start < end:
        raise ValueError(f"--start must be before --end, got {args.start} and {args.end}")
    return start, end


def _print_data(summary):
    s = summary
    print(f"data: {s.static_poses} rest poses, {s.trajectory_seconds:.1f} s of motion in {s.trajectories} run(s) "
          f"at {s.sample_rate:.4g} Hz ({s.torque_source} torques), {s.camera_observations} camera poses")
    for note in s.notes:
        print(f"note: {note}")


def _effort_note(data, groups):
    """Say so when measured efforts explain the motion and the explicit groups leave their sensor's bias out."""
    sensor = [g for g in ("effort_bias", "effort_delay") if g not in (groups or ())]
    if groups is not None and data.torque_source == "effort" and sensor:
        print(f"note: the torques are the measured efforts and --estimate leaves out {','.join(sensor)}: a torque "
              "sensor's offset or lag would go into the other parameters (add them, or leave --estimate out: the "
              "default groups add them)")


def _report_undetermined(run, allow_partial):
    names = list(run.undetermined)
    print(f"diffsim-ros calibrate: {len(names)} requested parameter(s) not determined by the data: {', '.join(names)}",
          file=sys.stderr)
    for name, reason in run.undetermined.items():
        print(f"  {name}: {reason}", file=sys.stderr)
    if not allow_partial:
        print("nothing written (pass --allow-partial to write the determined parameters)", file=sys.stderr)


def _split_hint(run):
    """Where the data's parts meet, in the bag's time, when they disagree (for --start/--end)."""
    split = run.stages[-1][1].split
    if split is None or not split.differ:
        return
    print(f"  the parts meet {split.at_ns / 1e9:.1f} s after the bag's first joint state: find where the robot "
          "changed and calibrate each segment with --start/--end", file=sys.stderr)


def _report_poor_fit(run, args):
    """No value of a poor fit is a result: nothing, or with ``--allow-partial`` only its diagnostics."""
    from diffsim_ros.pipelines.calibration import write_diagnostics

    if not args.allow_partial:
        print(f"diffsim-ros calibrate: {run.poor_fit}; no value is a result, nothing written "
              "(--allow-partial writes the diagnostics)", file=sys.stderr)
        _split_hint(run)
        return exits.UNDETERMINED
    code, paths = exits.write_guarded("diffsim-ros calibrate", args.out, lambda: write_diagnostics(run, args.out, args.force))
    if code != exits.OK:
        return code
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    print(f"diffsim-ros calibrate: {run.poor_fit}; no value is a result, no calibration written", file=sys.stderr)
    _split_hint(run)
    return exits.UNDETERMINED


def calibrate_command(args):
    """Handler: returns the exit code (see :mod:`diffsim_ros.cli.exits`)."""
    try:
        groups, window = _check_arguments(args)
    except ValueError as err:
        print(f"diffsim-ros calibrate: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    from tqdm import tqdm

    from diffsim_ros.estimation.data import DataError, UndeterminedError
    from diffsim_ros.estimation.preparation import DatasetOptions
    from diffsim_ros.io.bags import BagError
    from diffsim_ros.io.calibration import CalibrationError, atomic_directory
    from diffsim_ros.model import RobotModelError, load_robot_config
    from diffsim_ros.pipelines.calibration import calibrate_bag, write_outputs

    bar = tqdm(desc="calibrate", unit="eval", leave=False, disable=None)
    start = time.perf_counter()
    try:
        settings = _settings(args)
        set_threads(args.threads)
        atomic_directory(args.out, force=args.force)  # refuse early, before any work
        config = load_robot_config(args.config)
        options = DatasetOptions(torque_source=args.torque_source, torque_hold=args.torque_hold)
        run = calibrate_bag(args.bag, config, groups, options=options, read_options={"order_policy": args.order_policy},
                            window=window, no_camera=args.no_camera, settings=settings, model_kind=args.model,
                            progress=lambda cost: (bar.update(1), bar.set_postfix(cost=f"{cost:.4g}")))
        bar.close()
        _print_data(run.summary)
        _effort_note(run.summary, groups)
        print(summary_table(run))
        _base_note(run)
        if run.poor_fit:
            return _report_poor_fit(run, args)
        if run.undetermined:
            _report_undetermined(run, args.allow_partial)
            if not args.allow_partial:
                return exits.UNDETERMINED
        paths = write_outputs(run, args.out, config.urdf, force=args.force)
    except UndeterminedError as err:
        print(f"diffsim-ros calibrate: not determined: {err}; nothing written", file=sys.stderr)
        return exits.UNDETERMINED
    except (BagError, DataError, RobotModelError, CalibrationError, FileExistsError, ValueError) as err:
        print(f"diffsim-ros calibrate: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    finally:
        bar.close()
    print(f"calibrated in {time.perf_counter() - start:.1f} s")
    if run.undetermined_nuisances:
        print(f"note: not determined, and not requested: {', '.join(run.undetermined_nuisances)} (the default groups "
              "add the effort sensor's bias and delay so that the other parameters do not absorb them; where the data "
              "see them only imprecisely, the other stds include that); listed under 'unidentifiable:'")
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    if run.undetermined:  # written as asked (--allow-partial), yet not every requested result
        print(f"diffsim-ros calibrate: wrote the determined parameters; {len(run.undetermined)} requested "
              f"parameter(s) not determined (exit {exits.UNDETERMINED})", file=sys.stderr)
        return exits.UNDETERMINED
    return exits.OK

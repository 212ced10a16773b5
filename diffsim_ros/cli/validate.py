"""``diffsim-ros validate``: how well a calibration predicts the torques of another recording.

    diffsim-ros validate --config CONFIG --calibration CAL --bag BAG --out DIR
        [--torque-source auto|commanded|effort] [--start S] [--end S] [--force]

Prints the torque-prediction RMSE per joint of the nominal model (the config's URDF) and of
the calibrated one (its ``parameters`` applied) side by side, and writes ``validation.yaml``
and ``validation.png`` into DIR. Use a recording the calibration was not fitted on. Exit
codes (:mod:`diffsim_ros.cli.exits`): 0 written; 2 bad input (nothing written); 3 too little
motion to score a model on.
"""

import sys
from pathlib import Path

from diffsim_ros.cli import exits, summary
from diffsim_ros.cli.calibrate import parse_window
from diffsim_ros.vocabulary import HOLDS, TORQUE_SOURCES

# The library is imported by the handler: --help and argument errors answer without it.

__all__ = ["add_parser", "validate_command"]

PROG = "diffsim-ros validate"


def add_parser(subparsers):
    """Register the ``validate`` subcommand."""
    parser = subparsers.add_parser("validate", help=summary("validate"), description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="robot config YAML of the recording")
    parser.add_argument("--calibration", required=True, type=Path, help="calibration.yaml (from calibrate or replay)")
    parser.add_argument("--bag", required=True, type=Path, help="rosbag2 directory or .db3/.mcap file to predict")
    parser.add_argument("--out", required=True, type=Path, help="output directory (validation.yaml, validation.png)")
    parser.add_argument("--torque-source", choices=TORQUE_SOURCES, default="auto",
                        help="torques to predict, as calibrate's: commanded or measured efforts (auto: commanded "
                             "when the robot config names topics.commanded_torques)")
    parser.add_argument("--torque-hold", choices=("auto",) + HOLDS, default="auto",
                        help="how torques act between samples (auto: commanded held, efforts cubic)")
    parser.add_argument("--start", type=float, default=None, metavar="SECONDS",
                        help="score the bag from this time on [s from its first joint state]")
    parser.add_argument("--end", type=float, default=None, metavar="SECONDS",
                        help="score the bag up to this time [s from its first joint state]")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.set_defaults(handler=validate_command)


def _table(validation):
    labels = list(validation.rmse)
    rows = [["joint"] + [f"{label} [N·m]" for label in labels]]
    rows += [[joint] + [f"{validation.rmse[label][j]:.4g}" for label in labels] for j, joint in enumerate(validation.joints)]
    rows.append(["all joints"] + [f"{validation.overall(label):.4g}" for label in labels])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)


def validate_command(args):
    """Handler: returns the exit code."""
    try:
        window = parse_window(args)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    from diffsim_ros.estimation.data import DataError, UndeterminedError
    from diffsim_ros.estimation.preparation import DatasetOptions
    from diffsim_ros.io.bags import BagError
    from diffsim_ros.io.calibration import CalibrationError, apply_calibration, load_calibration
    from diffsim_ros.model import RobotModelError, load_robot_config
    from diffsim_ros.outputs import OutputPathError, atomic_directory
    from diffsim_ros.pipelines.validation import validate_bag

    try:
        atomic_directory(args.out, force=args.force)  # refuse early, before any work
        config = load_robot_config(args.config)
        nominal = config.build_model()
        calibrated = apply_calibration(nominal, load_calibration(args.calibration), robot=config.name, bounds=config.bounds)
        models = {"nominal": nominal, "calibrated": calibrated}
        options = DatasetOptions(torque_source=args.torque_source, torque_hold=args.torque_hold)
        validation = validate_bag(args.bag, config, models, options=options, window=window)
    except UndeterminedError as err:
        print(f"{PROG}: not enough data: {err}; nothing written", file=sys.stderr)
        return exits.UNDETERMINED
    except (BagError, DataError, RobotModelError, CalibrationError, OutputPathError, FileExistsError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    print(f"torque prediction on {validation.source}: {validation.seconds:.1f} s of motion, "
          f"{validation.samples} samples, against the {validation.torque_source} torques")
    print(_table(validation))
    code, paths = exits.write_guarded(PROG, args.out, lambda: _write(validation, args.out, args.force))
    if code == exits.OK:
        for kind, path in paths.items():
            print(f"wrote {kind}: {path}")
    return code


def _write(validation, out, force):
    from diffsim_ros.outputs import atomic_directory
    from diffsim_ros.pipelines.validation import write_validation

    with atomic_directory(out, force=force) as tmp:
        paths = write_validation(validation, tmp)
    return {kind: out / path.name for kind, path in paths.items()}

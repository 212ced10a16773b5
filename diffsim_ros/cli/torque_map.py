"""``diffsim-ros torque-map build|show``: build a net-torque lookup map, or summarize and plot one.

    diffsim-ros torque-map build --config CONFIG [--calibration FILE] --out MAP.npz [--force]
    diffsim-ros torque-map show MAP.npz [--png OUT.png] [--config CONFIG [--calibration FILE]]

Every argument, input file and output path is checked before the build starts (a bad one
exits with code 2 and one line naming it); the map is written atomically at the end.
"""

import math
import sys
from pathlib import Path

from diffsim_ros.cli import summary
from diffsim_ros.cli.exits import BAD_INPUT, OK
from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.torque_map import TorqueMap, TorqueMapGrid, build_torque_map, validate_torque_map
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.io.calibration import CalibrationError, apply_calibration, check_output_path, load_calibration
from diffsim_ros.model import RobotModelError, load_robot_config
from diffsim_ros.sim.factory import SIMULATOR_KINDS, make_simulator
from diffsim_ros.viz.torque_map import plot_torque_map
from diffsim_ros.threads import set_threads

__all__ = ["add_parser", "build_command", "load_model", "show_command"]

_ERRORS = (ControlError, CalibrationError, RobotModelError, FileExistsError, ValueError, OSError)

def add_parser(subparsers):
    """Register ``torque-map`` with its ``build`` and ``show`` subcommands."""
    parser = subparsers.add_parser("torque-map", help=summary("torque-map"))
    commands = parser.add_subparsers(dest="torque_map_command", required=True)

    build = commands.add_parser("build", help="build a map with the differentiable simulator")
    _model_arguments(build, required=True)
    build.add_argument("--out", required=True, type=Path, help="output .npz")
    build.add_argument("--force", action="store_true", help="overwrite an existing output")
    defaults = TorqueMapGrid()
    build.add_argument("--dt", type=float, default=defaults.dt, help="simulator step [s] (default %(default)s)")
    build.add_argument("--max-angle-step", type=float, default=defaults.max_angle_step, help="|dtheta| range [rad]")
    build.add_argument("--max-velocity", type=float, default=defaults.max_velocity, help="|omega| range [rad/s]")
    build.add_argument("--angle-points", type=int, default=defaults.angle_points)
    build.add_argument("--velocity-points", type=int, default=defaults.velocity_points)
    build.add_argument("--contexts", type=int, default=defaults.inertia_contexts, help="inertia contexts per joint")
    build.add_argument("--simulator", choices=SIMULATOR_KINDS, default="pbd", help="differentiable simulator (default %(default)s)")
    build.add_argument("--substeps", type=int, help="simulator substeps per step (default: 10 for pbd, 1 for rigid)")
    build.add_argument("--validate", type=int, default=10, metavar="N", help="off-grid checks per joint (0: none)")
    build.add_argument("--threads", type=int, default=1, help="torch and numba threads (small batched ops: 1 is fastest)")
    build.set_defaults(handler=build_command)

    show = commands.add_parser("show", help="print a map's metadata and write a heat-map PNG")
    show.add_argument("map", type=Path, help="map .npz")
    show.add_argument("--png", type=Path, help="output PNG (default: the map path with .png)")
    _model_arguments(show, required=False)
    show.set_defaults(handler=show_command)


def _model_arguments(parser, required):
    parser.add_argument("--config", type=Path, required=required, help="robot config YAML")
    parser.add_argument("--calibration", type=Path, help="calibration.yaml (its 'parameters' are applied)")


def load_model(config_path, calibration_path=None):
    """The robot model of a config, with a calibration file's parameters applied.

    Raises:
        CalibrationError: Unreadable or implausible calibration, one made for another robot,
            or parameters the model does not have.
        RobotModelError: Config or URDF problems.
    """
    config = load_robot_config(config_path)
    model = config.build_model()
    if calibration_path is None:
        return model
    return apply_calibration(model, load_calibration(calibration_path), robot=config.name, bounds=config.bounds)


def _check_arguments(args):
    """Named errors for arguments no build could use (before any work)."""
    for name in ("dt", "max_angle_step", "max_velocity"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise ControlError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    for name, least in (("angle_points", 2), ("velocity_points", 2), ("contexts", 1), ("validate", 0), ("threads", 1)):
        if getattr(args, name) < least:
            raise ControlError(f"--{name.replace('_', '-')} must be at least {least}, got {getattr(args, name)}")
    if args.substeps is not None and args.substeps < 1:
        raise ControlError(f"--substeps must be at least 1, got {args.substeps}")
    grid = TorqueMapGrid(dt=args.dt, max_angle_step=args.max_angle_step, max_velocity=args.max_velocity,
                         angle_points=args.angle_points, velocity_points=args.velocity_points,
                         inertia_contexts=args.contexts)
    grid.check()
    return grid


def _error(err):
    print(f"diffsim-ros torque-map: error: {err}", file=sys.stderr)
    return BAD_INPUT


def build_command(args):
    """Handler of ``torque-map build``; returns the exit code."""
    try:
        check_output_path(args.out, force=args.force, kind="file", what="torque map")
        grid = _check_arguments(args)
        model = load_model(args.config, args.calibration)
    except _ERRORS as err:
        return _error(err)
    set_threads(args.threads)
    try:
        simulator = make_simulator(model, args.dt, substeps=args.substeps, kind=args.simulator)
        tmap = build_torque_map(simulator, grid, progress=_progress)
        report = validate_torque_map(tmap, simulator, FastDynamics.from_model(model), args.validate) if args.validate else None
        tmap.save(args.out)  # atomic: refuses to commit after a Ctrl-C, even a swallowed one
    except _ERRORS as err:
        return _error(err)
    print(f"wrote {args.out}: {_summary(tmap)}")
    if report is not None:
        _print_validation(tmap, report)
    return OK


def show_command(args):
    """Handler of ``torque-map show``; returns the exit code."""
    try:
        if args.calibration is not None and args.config is None:
            raise ControlError("--calibration needs --config (the robot the calibration is applied to)")
        png = args.png or args.map.with_suffix(".png")
        if png.suffix.lower() != ".png":  # an image written over the map, or over any other file, destroys it
            raise ControlError(f"--png {png}: the image path must end in .png")
        if png.resolve() == args.map.resolve():
            raise ControlError(f"{args.map}: the map itself would be overwritten by its image; give --png")
        check_output_path(png, force=True, kind="file", what="PNG")
        model = load_model(args.config, args.calibration) if args.config else None
        tmap = TorqueMap.load(args.map, model)
        png = plot_torque_map(tmap, png)
    except _ERRORS as err:
        return _error(err)
    print(f"{args.map}: {_summary(tmap)}")
    if model is not None:
        print("exact for the given model (parameter hash)" if tmap.check_model(model) else
              "conditioned on the given model: same structure, other parameter values (a controller follows "
              "them through h(q) and M_jj(q); rebuild for the exact map)")
    print(f"wrote {png}")
    return OK


def _progress(done, total):
    print(f"  joint {done}/{total}", file=sys.stderr)


def _summary(tmap):
    g = tmap.grid
    return (
        f"robot {tmap.robot}, {len(tmap.joint_names)} joints, dt {g.dt} s, |dtheta| <= {g.max_angle_step} rad x "
        f"{g.angle_points}, |omega| <= {g.max_velocity} rad/s x {g.velocity_points}, {g.inertia_contexts} inertia "
        f"contexts, {tmap.simulator}, built in {tmap.build_seconds:.1f} s, parameter hash {tmap.parameter_hash[:12]}"
    )


def _print_validation(tmap, report):
    print(f"validation against direct optimization at off-grid points (lookup {report['lookup_seconds'] * 1e6:.1f} µs):")
    print(f"  {'joint':<10} {'rms [N·m]':>10} {'max [N·m]':>10} {'range [N·m]':>12}")
    for name, rms, worst, scale in zip(tmap.joint_names, report["rms"], report["max"], report["scale"]):
        print(f"  {name:<10} {rms:>10.4f} {worst:>10.4f} {scale:>12.2f}")

"""The ``diffsim-ros`` command line: one module per subcommand, each exposing ``add_parser``.

Only the chosen subcommand's module is imported (:data:`SUBCOMMANDS` names them with their
one-line summaries), and those modules load the library (torch, numba, rosbags) in their
handlers: ``diffsim-ros --help``, a subcommand's ``--help`` and argument errors answer in a
fraction of a second instead of seconds of imports.

Every subcommand ends with one of the exit codes of :mod:`diffsim_ros.cli.exits`. Ctrl-C
(SIGINT) at any point — while the subcommands' modules load, while arguments are checked, in
the middle of a computation or a write — ends with one line on stderr and exit code 130;
outputs are written atomically, so nothing half-written is left. A Ctrl-C that a library
catches and drops still counts: commands run inside :func:`diffsim_ros.outputs.record_interrupts`,
and every atomic writer refuses to create or commit anything after a recorded Ctrl-C. An
unexpected exception is reported in one line with exit code 1 (``DIFFSIM_ROS_TRACEBACK=1``
shows the traceback).
"""

import argparse
import contextlib
import importlib
import os
import signal
import sys

from diffsim_ros.cli.exits import FAILURE, INTERRUPTED, OK
from diffsim_ros.outputs import check_interrupted, record_interrupts
from diffsim_ros.threads import limit_native_threads

__all__ = ["SUBCOMMANDS", "TRACEBACK_VARIABLE", "build_parser", "main", "summary"]

SUBCOMMANDS = {
    "init": ("diffsim_ros.cli.init_config", "write a commented robot config from a URDF and a bag"),
    "calibrate": ("diffsim_ros.cli.calibrate", "calibrate a robot model from a recorded ROS 2 bag"),
    "replay": ("diffsim_ros.cli.replay", "play a bag through the estimator node (online estimation offline)"),
    "torque-map": ("diffsim_ros.cli.torque_map", "build or inspect net-torque lookup maps (impedance control)"),
    "demo": ("diffsim_ros.cli.demo", "online calibration and control of a simulated Baxter (no ROS needed)"),
    "validate": ("diffsim_ros.cli.validate",
                 "torque-prediction RMSE of the nominal and a calibrated model on another recording"),
    "estimate-objects": ("diffsim_ros.cli.estimate_objects",
                         "estimate object mass, friction and restitution from camera poses in a bag"),
}
"""Subcommand -> (module with ``add_parser(subparsers)``, one-line summary). Each parser sets
``handler(args) -> exit code``."""

TRACEBACK_VARIABLE = "DIFFSIM_ROS_TRACEBACK"
"""Set to 1 to get the traceback of an unexpected error instead of one line."""


def summary(command):
    """The one-line summary of a subcommand (its ``help`` in the top-level listing)."""
    return SUBCOMMANDS[command][1]


def _chosen(argv):
    """The subcommand ``argv`` names (its first argument that is not an option), or None."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv=None):
    """The top-level parser; the subcommand that ``argv`` chooses with its arguments (all when None).

    The other subcommands are registered by name and summary only, so that their modules
    (and the library) are not imported.
    """
    parser = argparse.ArgumentParser(prog="diffsim-ros", description="Differentiable robot physics for real-to-sim on ROS 2.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    chosen = None if argv is None else _chosen(argv)
    for name, (module, text) in SUBCOMMANDS.items():
        if argv is None or name == chosen:
            importlib.import_module(module).add_parser(subparsers)
        else:
            subparsers.add_parser(name, help=text, add_help=False)
    return parser


@contextlib.contextmanager
def _sigint_ignored():
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals go elsewhere anyway
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _run(argv):
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    return args.handler(args)


def main(argv=None):
    """Run a subcommand; returns (and, without ``argv``, exits with) its exit code."""
    limit_native_threads()  # before numpy, scipy or torch load (the handlers import them)
    try:
        with record_interrupts():
            code = _run(argv)
            if code not in (OK, INTERRUPTED):  # a Ctrl-C a library swallowed ended it early: that is the outcome
                check_interrupted()
    except KeyboardInterrupt:
        with _sigint_ignored():  # a second Ctrl-C must not interrupt the message
            print("diffsim-ros: interrupted (Ctrl-C); no partial outputs were written", file=sys.stderr)
        code = INTERRUPTED
    except Exception as err:  # a bug, not bad input: one line unless asked for the traceback
        if os.environ.get(TRACEBACK_VARIABLE) == "1":
            raise
        print(f"diffsim-ros: unexpected error: {type(err).__name__}: {err} "
              f"(set {TRACEBACK_VARIABLE}=1 for the traceback)", file=sys.stderr)
        code = FAILURE
    if argv is None:
        sys.exit(code)
    return code

"""The ``diffsim-ros`` command line: one module per subcommand, each exposing ``add_parser``.

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

__all__ = ["SUBCOMMAND_MODULES", "TRACEBACK_VARIABLE", "build_parser", "main"]

SUBCOMMAND_MODULES = ("diffsim_ros.cli.calibrate", "diffsim_ros.cli.replay", "diffsim_ros.cli.torque_map", "diffsim_ros.cli.demo",
                      "diffsim_ros.cli.estimate_objects")
"""Modules with ``add_parser(subparsers)``; each parser sets ``handler(args) -> exit code``."""

TRACEBACK_VARIABLE = "DIFFSIM_ROS_TRACEBACK"
"""Set to 1 to get the traceback of an unexpected error instead of one line."""


def build_parser():
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="diffsim-ros", description="Differentiable robot physics for real-to-sim on ROS 2.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
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
    args = build_parser().parse_args(argv)
    return args.handler(args)


def main(argv=None):
    """Run a subcommand; returns (and, without ``argv``, exits with) its exit code."""
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

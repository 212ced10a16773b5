"""The ``diffsim-ros`` command line: one module per subcommand, each exposing ``add_parser``."""

import argparse
import importlib
import sys

__all__ = ["SUBCOMMAND_MODULES", "main"]

SUBCOMMAND_MODULES = ("diffsim_ros.cli.calibrate", "diffsim_ros.cli.torque_map", "diffsim_ros.cli.demo", "diffsim_ros.cli.estimate_objects")
"""Modules with ``add_parser(subparsers)``; each parser sets ``handler(args) -> exit code``."""


def build_parser():
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="diffsim-ros", description="Differentiable robot physics for real-to-sim on ROS 2.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv=None):
    """Run a subcommand; returns (and exits with) its exit code."""
    args = build_parser().parse_args(argv)
    code = args.handler(args)
    if argv is None:
        sys.exit(code)
    return code

"""``diffsim-ros --help``, a subcommand's ``--help`` and argument errors load no library (issue 44).

Importing torch, numba, scipy, rosbags or matplotlib costs seconds of CPU; a user asking for
help or mistyping an option must not pay it. Each case runs in a fresh interpreter and lists
the heavy modules it imported (the CPU figures are in benchmarks/RESULTS.md, not asserted).
"""

import json
import subprocess
import sys

import pytest

from oracles import REPO

HEAVY = ("torch", "numba", "numpy", "scipy", "rosbags", "matplotlib", "yourdfpy", "rclpy")
"""Modules the answers below must not import."""

_PROBE = """
import json, sys
from diffsim_ros.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exit:
    code = exit.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"code": code, "heavy": heavy}))
"""

CASES = {
    "top-level help": (["--help"], 0),
    "no subcommand": ([], 2),
    "unknown subcommand": (["calibrat"], 2),
    "calibrate help": (["calibrate", "--help"], 0),
    "replay help": (["replay", "--help"], 0),
    "calibrate missing --out": (["calibrate", "--bag", "b", "--config", "c"], 2),
    "calibrate unknown group": (["calibrate", "--bag", "b", "--config", "c", "--out", "o", "--estimate", "mass"], 2),
    "calibrate bad window": (["calibrate", "--bag", "b", "--config", "c", "--out", "o", "--start", "5", "--end", "1"], 2),
    "calibrate bad threads": (["calibrate", "--bag", "b", "--config", "c", "--out", "o", "--threads", "0"], 2),
    "calibrate bad model": (["calibrate", "--bag", "b", "--config", "c", "--out", "o", "--model", "mujoco"], 2),
}


def _probe(argv):
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_help_and_argument_errors_import_no_library(case):
    argv, expected = CASES[case]
    result, stderr = _probe(argv)
    assert result["code"] == expected, stderr
    assert result["heavy"] == [], f"{argv} imported {result['heavy']}"


def test_the_probe_sees_a_library_import():
    """The check can fail: a subcommand that really runs loads the library."""
    result, _ = _probe(["calibrate", "--bag", "missing.db3", "--config", "missing.yaml", "--out", "/nonexistent/x/y"])
    assert result["code"] == 2
    assert "torch" in result["heavy"]


def test_the_top_level_help_lists_every_subcommand():
    from diffsim_ros.cli import SUBCOMMANDS, build_parser

    text = build_parser(["--help"]).format_help()
    for name, (_, summary) in SUBCOMMANDS.items():
        assert name in text and summary.split()[0] in text

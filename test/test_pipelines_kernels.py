"""Ahead-of-time compilation of the numba kernels (diffsim_ros.pipelines.kernels)."""

import pytest

from diffsim_ros.pipelines.kernels import compile_kernels, main


def test_a_family_runs_in_its_own_process():
    seconds = compile_kernels(["contact"], jobs=1)  # from the cache when warm: seconds either way
    assert list(seconds) == ["contact"] and seconds["contact"] >= 0.0


def test_unknown_families_and_bad_jobs_are_named(capsys):
    with pytest.raises(ValueError, match=r"unknown kernel families \['bogus'\]"):
        compile_kernels(["bogus", "contact"])
    for argv, message in ((["bogus"], "unknown kernel families ['bogus']"), (["--jobs", "0"], "--jobs must be at least 1")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


"""Shared benchmark utilities: timing with medians and section-wise updates of RESULTS.md.

Each benchmark script owns one section of RESULTS.md (between BEGIN/END markers) and
rewrites only that section, so scripts can be re-run independently.
"""

import contextlib
import datetime
import fcntl
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

# The test oracles (Pinocchio, MuJoCo built from the same URDF) are shared with benchmarks;
# ROS packages name their test directory "test", which shadows the stdlib package of that name.
_TEST_DIR = str(Path(__file__).resolve().parents[1] / "test")
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

__all__ = ["RESULTS", "cpu_hogs", "time_call", "percentile", "machine_line", "write_section", "markdown_table", "run_timed"]

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def time_call(fn, repeats=50, warmup=5, inner=1):
    """Per-call wall times [s] of ``fn`` (``inner`` calls per sample), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return samples


def run_timed(argv, env=None, cwd=None):
    """Run ``argv`` to its exit: ``{"status": exit code, "cpu": user + system [s] of it and its children,
    "wall": [s], "rss": peak RSS [MiB], "out": stdout, "err": stderr}`` (rusage from ``os.wait4``)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"status": process.returncode, "cpu": usage.ru_utime + usage.ru_stime, "wall": wall,
                "rss": usage.ru_maxrss / 1024, "out": out.read(), "err": err.read()}


def percentile(samples, p):
    """The p-th percentile (0..100) of a list of numbers (nearest rank)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, int(round(p / 100.0 * (len(ordered) - 1)))))
    return ordered[index]


def median(samples):
    return statistics.median(samples)


def machine_line():
    """One line describing where and when the numbers were measured."""
    return (
        f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"Python {platform.python_version()}"
    )


def command_line(module, argv=None):
    """The command that ran benchmark ``module`` (e.g. "bench_online") with ``argv`` (default: this process's)."""
    return " ".join(["python -m benchmarks." + module, *(argv if argv is not None else sys.argv[1:])])


UNDER_LOAD = 0.5
"""1-minute load average above which a run's figures are marked as measured under load."""


def load_note(*loads):
    """" (measured under load)" when any of the load averages ``loads`` exceeds :data:`UNDER_LOAD`, else ""."""
    return " (measured under load)" if max(loads) > UNDER_LOAD else ""


def measured_line(command, seconds):
    """"Measured <machine>, load average ... at the end, <seconds> s. `<command>`." (``seconds`` nan: written from run logs)."""
    took = f", {seconds:.0f} s" if math.isfinite(seconds) else ", from run logs"
    return f"Measured {machine_line()}, load average {os.getloadavg()[0]:.1f} at the end{took}. `{command}`."


def markdown_table(header, rows):
    """A Markdown table from a header list and rows of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(name, body):
    """Replace (or append) the section ``name`` of RESULTS.md with ``body`` (Markdown)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    RESULTS.touch()
    with open(RESULTS, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        text = handle.read()
        if not text.strip():
            text = "# Benchmark results\n\nWritten by the scripts in `benchmarks/` (run by hand, e.g. `make bench`).\n"
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            text = head + block + tail
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        handle.seek(0)
        handle.write(text)
        handle.truncate()


@contextlib.contextmanager
def cpu_hogs(seconds):
    """One busy-loop process per core at normal priority while inside (none for ``seconds`` 0).

    The loops end by themselves after ``seconds`` [s] too, should this process die first.
    """
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 1)] if seconds > 0 else []
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()

"""Cold compile of the numba kernel families (issue 44, start-up): CPU per family and per kernel.

Each family of :data:`diffsim_ros.pipelines.kernels.FAMILIES` runs alone in a fresh process
with an empty numba cache (``NUMBA_CACHE_DIR`` a new temporary directory), one after another,
so that every kernel it needs compiles there. A numba event listener (``numba:compile``)
records the CPU seconds of every compilation, exclusive of the compilations nested in it (a
kernel's callees compile inside it unless they are inlined), with the argument types it was
compiled for. Then ``python -m diffsim_ros.pipelines.kernels`` runs once from another empty
cache, as a fresh install does: its CPU is summed over the process and its workers.

Run: ``python -m benchmarks.bench_compile [--families pbd,...] [--top 15] [--tree CHECKOUT] [--no-all]``
(``--tree``: measure another checkout's package, e.g. the commit before a change; prints, writes
nothing: the "cold compile" section of RESULTS.md is written by hand from its output).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "measure_family", "measure_all"]

_ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
from diffsim_ros.threads import limit_native_threads
limit_native_threads()
from numba.core import event

class Exclusive(event.Listener):
    # CPU of each compile minus the compiles nested in it; of that, the part holding the LLVM lock
    def __init__(self):
        self.stack, self.rows, self.llvm_start = [], [], None
    def on_start(self, ev):
        self.stack.append([time.process_time(), 0.0, 0.0])
    def on_end(self, ev):
        start, nested, llvm = self.stack.pop()
        total = time.process_time() - start
        if self.stack:
            self.stack[-1][1] += total
        d = ev.data["dispatcher"]
        name = f"{d.py_func.__module__}.{d.py_func.__qualname__}"
        args = ", ".join(str(a) for a in ev.data["args"])
        self.rows.append((name, args[:160], total - nested, total, llvm))

class Llvm(event.Listener):
    def __init__(self, compiles):
        self.compiles, self.start, self.depth = compiles, None, 0
    def on_start(self, ev):
        self.depth += 1
        if self.depth == 1:
            self.start = time.process_time()
    def on_end(self, ev):
        self.depth -= 1
        if self.depth == 0 and self.compiles.stack:
            self.compiles.stack[-1][2] += time.process_time() - self.start

listener = Exclusive()
event.register("numba:compile", listener)
event.register("numba:llvm_lock", Llvm(listener))
start = time.process_time()
from diffsim_ros.pipelines.kernels import FAMILIES
FAMILIES[sys.argv[1]]()
json.dump({"cpu": time.process_time() - start, "rows": listener.rows}, sys.stdout)
"""


def _environment(cache, tree):
    return dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(tree))


def measure_family(name, tree=_ROOT):
    """``{"cpu": s, "rows": [(kernel, argument types, exclusive s, inclusive s, LLVM s), ...]}`` of a cold
    run of family ``name`` of the package in checkout ``tree``."""
    with tempfile.TemporaryDirectory(prefix="cold_numba_") as cache:
        out = subprocess.run([sys.executable, "-c", _CHILD, name], env=_environment(cache, tree), cwd=tree,
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def measure_all(tree=_ROOT):
    """(CPU s summed over the process and its workers, wall s) of ``python -m diffsim_ros.pipelines.kernels``, cold."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cold_numba_") as cache:
        subprocess.run([sys.executable, "-m", "diffsim_ros.pipelines.kernels"], env=_environment(cache, tree), cwd=tree,
                       check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, time.monotonic() - start


def _per_kernel(rows):
    """``{kernel: [exclusive s, specialisations, of which LLVM s]}``."""
    table = {}
    for name, _, exclusive, _, llvm in rows:
        entry = table.setdefault(name, [0.0, 0, 0.0])
        entry[0] += exclusive
        entry[1] += 1
        entry[2] += llvm
    return table


def main(argv=None):
    from diffsim_ros.pipelines.kernels import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--top", type=int, default=12, help="kernels listed per family")
    parser.add_argument("--no-all", action="store_true", help="skip the whole `pipelines.kernels` run")
    parser.add_argument("--json", help="also write every row to this file")
    parser.add_argument("--tree", type=Path, default=_ROOT, help="checkout whose package is measured (default: this one)")
    args = parser.parse_args(argv)
    results = {}
    for name in args.families.split(","):
        results[name] = measure_family(name, args.tree.resolve())
        data = results[name]
        compiled = sum(r[2] for r in data["rows"])
        print(f"\n## {name}: {data['cpu']:.1f} s CPU ({compiled:.1f} s in numba compiles, {len(data['rows'])} compiles)")
        table = sorted(_per_kernel(data["rows"]).items(), key=lambda kv: -kv[1][0])
        for kernel, (seconds, count, llvm) in table[: args.top]:
            print(f"  {seconds:7.1f} s  (LLVM {llvm:5.1f} s)  x{count}  {kernel}")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results))
    if not args.no_all:
        cpu, wall = measure_all(args.tree.resolve())
        print(f"\npython -m diffsim_ros.pipelines.kernels, cold: {cpu:.1f} s CPU (all processes), {wall:.1f} s wall; "
              f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

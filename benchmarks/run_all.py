"""Run every ``benchmarks/bench_*.py`` in turn (``make bench``); each updates its RESULTS.md section."""

import argparse
import importlib
import pkgutil
import sys
import time

import benchmarks


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, not a run
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    failed = []
    for name in names:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        module = importlib.import_module(f"benchmarks.{name}")
        argv, sys.argv = sys.argv, [name]
        try:
            module.main()
        except Exception as err:  # keep going: one broken benchmark must not hide the others
            failed.append(name)
            print(f"{name} failed: {err!r}", flush=True)
        finally:
            sys.argv = argv
        print(f"== {name}: {time.perf_counter() - start:.0f} s", flush=True)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()

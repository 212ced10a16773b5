"""numba's kernel cache is refreshed when a kernel's dependencies in other files change, and only then.

numba checks a cached kernel against its own source file only; ``diffsim_ros._compiled.njit``
stamps each kernel module's cached kernels with a fingerprint of the module and of the package
modules it imports, transitively, and empties them when it differs. An edit to one kernel module
keeps the cached kernels of the modules that do not import it.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from diffsim_ros._compiled import STAMP_SUFFIX, module_dependencies, module_fingerprint, refresh_cache_files

SCALE_KERNEL = """\
from diffsim_ros._compiled import njit
from kpkg.consts import SCALE


@njit(cache=True)
def scaled(x):
    return SCALE * x
"""

SHIFT_KERNEL = """\
from diffsim_ros._compiled import njit


@njit(cache=True)
def shifted(x):
    return x + {offset}
"""

CALLER_KERNEL = """\
from diffsim_ros._compiled import njit
from kpkg.a.scale import scaled


@njit(cache=True)
def both(x):
    return scaled(x) + 1.0
"""


def _package(tmp_path):
    """kpkg: a/scale.py (a kernel reading consts.SCALE, which consts takes from deeper.py),
    b/shift.py (an unrelated kernel), c/both.py (a kernel calling a's), other.py (imported by none)."""
    root = tmp_path / "kpkg"
    for sub in ("", "a", "b", "c"):
        (root / sub).mkdir(exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "a" / "scale.py").write_text(SCALE_KERNEL)
    (root / "b" / "shift.py").write_text(SHIFT_KERNEL.format(offset=1.0))
    (root / "c" / "both.py").write_text(CALLER_KERNEL)
    (root / "consts.py").write_text("from .deeper import BASE\n\nSCALE = 2.0 * BASE\n")
    (root / "deeper.py").write_text("BASE = 1.0\n")
    (root / "other.py").write_text("UNRELATED = 1\n")
    return root


def _fingerprint(path, root):
    return module_fingerprint.__wrapped__(path, root)  # uncached: the files change within a test


def test_the_fingerprint_covers_the_module_and_what_it_imports_transitively_only(tmp_path):
    root = _package(tmp_path)
    scale, shift, both = root / "a" / "scale.py", root / "b" / "shift.py", root / "c" / "both.py"
    assert {p.relative_to(root).as_posix() for p in module_dependencies(both, root)} == \
        {"c/both.py", "a/scale.py", "consts.py", "deeper.py"}
    before = {p: _fingerprint(p, root) for p in (scale, shift, both)}
    (root / "other.py").write_text("UNRELATED = 2\n")
    assert {p: _fingerprint(p, root) for p in before} == before
    (root / "deeper.py").write_text("BASE = 1.5\n")  # two imports away from scale.py, three from both.py
    after = {p: _fingerprint(p, root) for p in before}
    assert after[scale] != before[scale] and after[both] != before[both] and after[shift] == before[shift]
    shift.write_text(SHIFT_KERNEL.format(offset=2.0))
    assert _fingerprint(shift, root) != after[shift]
    assert _fingerprint(scale, root) == after[scale] and _fingerprint(both, root) == after[both]


def test_a_module_stamped_otherwise_loses_its_cached_kernels_once_and_its_neighbours_keep_theirs(tmp_path):
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    names = ("k.f-1.py311.nbi", "k.f-1.py311.1.nbc", "k.cpython-311.pyc", "k_other.g-1.py311.nbi", "m.h-3.py311.nbi")
    for name in names:
        (cache / name).write_text("x")
    assert refresh_cache_files(cache, "k", "old")
    kept = ["k.cpython-311.pyc", "k_other.g-1.py311.nbi", "m.h-3.py311.nbi", f"k{STAMP_SUFFIX}"]
    assert sorted(p.name for p in cache.iterdir()) == sorted(kept)
    (cache / "k.f-1.py311.nbi").write_text("x")
    assert not refresh_cache_files(cache, "k", "old")  # stamped: kept
    assert (cache / "k.f-1.py311.nbi").exists()
    assert refresh_cache_files(cache, "k", "new") and not (cache / "k.f-1.py311.nbi").exists()
    assert (cache / f"k{STAMP_SUFFIX}").read_text() == "new"
    assert (cache / "m.h-3.py311.nbi").exists() and (cache / "k_other.g-1.py311.nbi").exists()


def _runner(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parents[1])])}
    env.pop("NUMBA_CACHE_DIR", None)  # the caches beside the sources, in tmp_path
    run = textwrap.dedent("""
        from kpkg.a.scale import scaled
        from kpkg.b.shift import shifted
        from kpkg.c.both import both
        for kernel in (scaled, shifted, both):
            print(kernel(1.0), sum(kernel.stats.cache_hits.values()))
    """)

    def values():
        """``[(result, loaded from the cache)]`` of scaled(1), shifted(1), both(1), each in a fresh process."""
        out = subprocess.run([sys.executable, "-c", run], env=env, capture_output=True, text=True, check=True).stdout
        pairs = [line.split() for line in out.splitlines()]
        return [(float(result), int(hits) > 0) for result, hits in pairs]

    return values


def test_an_edit_keeps_the_cache_of_kernels_that_do_not_import_it_and_empties_those_that_do(tmp_path):
    root = _package(tmp_path)
    values = _runner(tmp_path)
    assert values() == [(2.0, False), (2.0, False), (3.0, False)]  # compiled and saved
    assert values() == [(2.0, True), (2.0, True), (3.0, True)]  # loaded from the cache
    (root / "b" / "shift.py").write_text(SHIFT_KERNEL.format(offset=5.0))  # an unrelated kernel module
    assert values() == [(2.0, True), (6.0, False), (3.0, True)]
    (root / "a" / "scale.py").write_text(SCALE_KERNEL.replace("SCALE * x", "SCALE * x * 10.0"))
    assert values() == [(20.0, False), (6.0, True), (21.0, False)]  # both.py unchanged: numba alone would keep 3.0
    (root / "deeper.py").write_text("BASE = 3.0\n")  # imported by consts, imported by scale.py
    assert values() == [(60.0, False), (6.0, True), (61.0, False)]

"""numba's kernel cache is refreshed when a kernel's dependencies in other files change.

numba checks a cached kernel against its own source file only; ``diffsim_ros._compiled.njit``
stamps each cache directory with a fingerprint of the kernel modules and of what they import.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from diffsim_ros._compiled import STAMP, kernel_fingerprint, refresh_cache_directory

KERNEL = """\
from diffsim_ros._compiled import njit
from kpkg.consts import SCALE


@njit(cache=True)
def scaled(x):
    return SCALE * x
"""


def _package(tmp_path, scale=2.0):
    root = tmp_path / "kpkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "kernels.py").write_text(KERNEL)
    (root / "consts.py").write_text(f"SCALE = {scale}\n")
    (root / "other.py").write_text("UNRELATED = 1\n")
    return root


def _fingerprint(root):
    return kernel_fingerprint.__wrapped__(root)  # uncached: the files change within a test


def test_the_fingerprint_covers_the_kernels_and_what_they_import_only(tmp_path):
    root = _package(tmp_path)
    before = _fingerprint(root)
    (root / "other.py").write_text("UNRELATED = 2\n")
    assert _fingerprint(root) == before
    (root / "consts.py").write_text("SCALE = 3.0\n")
    changed = _fingerprint(root)
    assert changed != before
    (root / "kernels.py").write_text(KERNEL + "\n# edited\n")
    assert _fingerprint(root) != changed


def test_a_directory_stamped_otherwise_loses_its_cached_kernels_once(tmp_path):
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    for name in ("k.f-1.py311.nbi", "k.f-1.py311.1.nbc", "k.cpython-311.pyc"):
        (cache / name).write_text("x")
    assert refresh_cache_directory(cache, "old")
    assert sorted(p.name for p in cache.iterdir()) == sorted(["k.cpython-311.pyc", STAMP])
    (cache / "k.f-1.py311.nbi").write_text("x")
    assert not refresh_cache_directory(cache, "old")  # stamped: kept
    assert (cache / "k.f-1.py311.nbi").exists()
    assert refresh_cache_directory(cache, "new") and not (cache / "k.f-1.py311.nbi").exists()
    assert (cache / STAMP).read_text() == "new"


def test_a_kernel_sees_a_changed_constant_of_another_module(tmp_path):
    root = _package(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parents[1])])}
    run = textwrap.dedent("""
        from kpkg.kernels import scaled
        print(scaled(1.0), sum(scaled.stats.cache_hits.values()))
    """)

    def value():
        out = subprocess.run([sys.executable, "-c", run], env=env, capture_output=True, text=True, check=True).stdout
        result, hits = out.split()
        return float(result), int(hits)

    assert value() == (2.0, 0)  # compiled and saved
    assert value() == (2.0, 1)  # loaded from the cache
    (root / "consts.py").write_text("SCALE = 3.0\n")  # kernels.py itself unchanged
    assert value() == (3.0, 0)

"""The package's layers: every import points down (issue 18), read from the source (AST only, no imports).

Also from the source: no function (or method) of the package is longer than
:data:`MAX_FUNCTION_LINES` lines, decorators and docstring included.

Each top-level package or module of ``diffsim_ros/`` sits in one tier of :data:`LAYERS`; a
module may import its own package and the tiers below it, never a peer of its tier nor a tier
above. Imports inside functions count too (a lazy import is still a dependency). Besides:
mujoco is imported by ``testbed/`` only (the optional ``[sim]`` extra), and nothing below
``runtime/`` imports rclpy.
"""

import ast
from pathlib import Path

import pytest

from oracles import REPO

PACKAGE = "diffsim_ros"

# Lowest first. Derived from the code: estimation and control are peers (neither imports the
# other); io reads bags into estimation's streams and takes the output names from control;
# testbed (MuJoCo plant, hardware emulators, scenarios) and viz (figures) sit above the library
# layers and below nodes (sim_robot_node runs the testbed) and pipelines (which run the nodes
# and draw with viz); the CLI is argparse and printing on top.
LAYERS = (
    ("_compiled", "_tangents", "outputs", "resources", "threads", "vocabulary"),  # shared utilities that import nothing of the package
    ("model",),
    ("dynamics",),
    ("sim",),
    ("estimation", "control"),
    ("io",),
    ("runtime",),
    ("testbed", "viz"),
    ("nodes",),
    ("pipelines",),
    ("cli",),
)
MUJOCO_ONLY_IN = "testbed"
RCLPY_NOT_BELOW = "runtime"
MAX_FUNCTION_LINES = 80  # DEVELOPERS.md style: small functions


def _unit(path, root):
    """Top-level package or module name of a source file (``None`` for the package's __init__)."""
    parts = path.relative_to(root).parts
    if len(parts) == 1:
        return None if parts[0] == "__init__.py" else parts[0][:-3]
    return parts[0]


def _module_name(path, root):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts), parts[-1] == "__init__"


def imported_modules(path, root):
    """``(line, dotted name)`` of every import in a source file, relative imports resolved.

    ``from diffsim_ros import dynamics`` yields ``diffsim_ros.dynamics``.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    module, is_package = _module_name(path, root)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            out.append((node.lineno, base))
            if base == root.name:
                out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def violations(root, layers=LAYERS, mujoco_only_in=MUJOCO_ONLY_IN, rclpy_not_below=RCLPY_NOT_BELOW):
    """Every import breaking the layer rules under ``root`` (a package directory), as readable lines."""
    tier = {name: rank for rank, names in enumerate(layers) for name in names}
    problems = []
    for path in sorted(root.rglob("*.py")):
        unit = _unit(path, root)
        if unit is None:
            continue
        if unit not in tier:
            problems.append(f"{path.relative_to(root)}: '{unit}' is in no layer; add it to LAYERS")
            continue
        where = f"{path.relative_to(root.parent)}"
        for line, name in imported_modules(path, root):
            head, _, rest = name.partition(".")
            if head == "mujoco" and unit != mujoco_only_in:
                problems.append(f"{where}:{line}: imports mujoco (only {mujoco_only_in}/ may)")
            if head == "rclpy" and tier[unit] < tier[rclpy_not_below]:
                problems.append(f"{where}:{line}: imports rclpy below {rclpy_not_below}/")
            if head != root.name or not rest:
                continue
            target = rest.split(".")[0]
            if target == unit or target not in tier:
                continue
            if tier[target] >= tier[unit]:
                relation = "a peer" if tier[target] == tier[unit] else "a layer above"
                problems.append(f"{where}:{line}: {unit} imports {name} ({target} is {relation})")
    return problems


def test_every_import_points_down():
    problems = violations(REPO / PACKAGE)
    assert not problems, "imports against the layers:\n" + "\n".join(problems)


def test_every_package_has_a_layer():
    root = REPO / PACKAGE
    units = {_unit(path, root) for path in root.rglob("*.py")} - {None}
    placed = {name for names in LAYERS for name in names}
    assert units == placed, f"not in LAYERS: {sorted(units - placed)}; in LAYERS but gone: {sorted(placed - units)}"


def _fake_package(tmp_path, files):
    root = tmp_path / PACKAGE
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("files, expected", [
    ({"model/a.py": "from diffsim_ros.sim.rigid import X\n", "sim/__init__.py": ""}, "model imports diffsim_ros.sim.rigid"),
    ({"model/a.py": "def f():\n    from diffsim_ros import control\n"}, "model imports diffsim_ros.control"),
    ({"estimation/a.py": "import diffsim_ros.control.safety\n"}, "is a peer"),
    ({"sim/__init__.py": "", "sim/a.py": "from ..io import bags\n"}, "sim imports diffsim_ros.io"),
    ({"nodes/a.py": "import mujoco\n"}, "imports mujoco"),
    ({"io/a.py": "from rclpy.node import Node\n"}, "imports rclpy below runtime/"),
    ({"extras/a.py": ""}, "is in no layer"),
])
def test_the_checker_finds_each_kind_of_violation(tmp_path, files, expected):
    problems = violations(_fake_package(tmp_path, files))
    assert any(expected in line for line in problems), problems


def test_the_checker_accepts_downward_imports(tmp_path):
    files = {"nodes/a.py": "from diffsim_ros.runtime import x\nfrom diffsim_ros.testbed.plant import P\nimport rclpy\n",
             "testbed/plant.py": "import mujoco\nfrom ..control import references\n", "model/b.py": "from . import c\n"}
    assert violations(_fake_package(tmp_path, files)) == []


def private_imports(root):
    """``path:line module.name`` of every import of another module's private name (``_x``, not dunder)
    from the package, relative imports included: what a module shares is public and in its ``__all__``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith(root.name)):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.module or '.'}.{alias.name}")
    return out


def test_no_module_imports_another_modules_private_names():
    found = private_imports(REPO / PACKAGE)
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_the_private_import_check_finds_absolute_and_relative_imports(tmp_path):
    files = {"model/a.py": "from diffsim_ros.model.b import public, _private\n",
             "model/c.py": "def f():\n    from .b import (\n        _hidden,\n    )\n",
             "model/d.py": "from diffsim_ros.model.b import __version__\nfrom numpy import _globals\n"}
    found = private_imports(_fake_package(tmp_path, files))
    assert found == ["diffsim_ros/model/a.py:1 diffsim_ros.model.b._private", "diffsim_ros/model/c.py:2 b._hidden"], found


def long_functions(root, limit=MAX_FUNCTION_LINES):
    """``path:line name (lines)`` of every function under ``root`` longer than ``limit`` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = node.end_lineno - first + 1
                if lines > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_is_longer_than_the_limit():
    found = long_functions(REPO / PACKAGE)
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def test_the_length_check_counts_decorators_and_nested_functions(tmp_path):
    def body(count, indent):
        return "\n".join(f"{indent}x{i} = {i}" for i in range(count))

    files = {"model/a.py": f"@staticmethod\ndef fits():\n{body(78, '    ')}\n",  # 80 lines with its decorator
             "model/b.py": f"@staticmethod\n@staticmethod\ndef too_long():\n{body(78, '    ')}\n",  # 81
             "model/c.py": f"class C:\n    def outer(self):\n        def inner():\n{body(80, ' ' * 12)}\n"}
    found = long_functions(_fake_package(tmp_path, files))
    assert sorted(line.split(" ")[1] for line in found) == ["inner", "outer", "too_long"], found


def defined_after_main_guard(root):
    """``path name`` of every top-level definition that follows a script's ``if __name__`` guard:
    the guard runs ``main()`` before Python reaches it, so a script using it dies with a
    NameError (bench_control_experiments.py did, unnoticed, until 2026-11-30)."""
    out = []
    for path in sorted(root.glob("*.py")):
        guarded = False
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
                guarded = True
            elif guarded and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)):
                out.append(f"{path.name} {getattr(node, 'name', ast.unparse(node)[:40])}")
    return out


def test_no_script_defines_anything_after_its_main_guard():
    found = [line for folder in ("benchmarks", PACKAGE + "/cli") for line in defined_after_main_guard(REPO / folder)]
    assert not found, "defined after the main guard:\n" + "\n".join(found)


def test_the_main_guard_check_finds_a_late_definition(tmp_path):
    (tmp_path / "script.py").write_text('def main():\n    helper()\n\n\nif __name__ == "__main__":\n    main()\n\n\n'
                                        'def helper():\n    pass\n')
    (tmp_path / "fine.py").write_text('def main():\n    pass\n\n\nif __name__ == "__main__":\n    main()\n')
    assert defined_after_main_guard(tmp_path) == ["script.py helper"]


def mains_without_options(root):
    """Scripts under ``root`` whose ``main`` builds no ArgumentParser: ``--help`` starts them
    (a benchmark then measures for minutes and rewrites its RESULTS.md section)."""
    out = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        if mains and "ArgumentParser" not in ast.unparse(mains[0]):
            out.append(path.name)
    return out


def test_every_benchmark_answers_help():
    found = mains_without_options(REPO / "benchmarks")
    assert not found, "a main() without an ArgumentParser (--help would run it):\n" + "\n".join(found)

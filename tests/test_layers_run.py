"""Layer rules of the run plan (issue 28) that ../shared/tools/layers.json cannot state.

``layers.json`` forbids imports by module prefix, with exceptions by importer only; "run.py
imports no task" and "nothing above the engines starts a run itself" (every entry point, the
study coordinator included, calls :func:`rvfedprs.plan.run`) are checked here.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rvfedprs"

#: Modules that run any task's plan: they find a task by name, never by import.
TASK_AGNOSTIC = ("run.py", "plan.py", "federation/plan.py")
TASK_PACKAGES = ("rvfedprs.genomic", "rvfedprs.imaging", "rvfedprs.study")

#: The engines' own entry points (the server loop, its rounds, the wrappers that went): only
#: the plan runner and the engine layer call them.
ENGINE_CALLS = ("serve", "run_rounds", "run_inprocess", "run_flower")
#: Where they may be called: the engine layer (whose processes also serve their own loops,
#: e.g. a warm ClientApp) and the plan runner.
ENGINE_LAYER = "federation/"
PLAN_RUNNER = "plan.py"


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports (functions' imports too), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _engine_calls(path: Path) -> list[tuple[str, int]]:
    """Calls of :data:`ENGINE_CALLS` in ``path`` (by name or attribute), with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ENGINE_CALLS:
                found.append((name, node.lineno))
    return found


@pytest.mark.parametrize("module", TASK_AGNOSTIC)
def test_the_task_agnostic_modules_import_no_task(module):
    path = PACKAGE / module
    broken = [
        f"{module}:{line} imports {name}"
        for name, line in _imports(path)
        if any(name == p or name.startswith(p + ".") for p in TASK_PACKAGES)
    ]
    assert not broken, broken


def test_nothing_above_the_engines_starts_a_run_itself():
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module == PLAN_RUNNER or module.startswith(ENGINE_LAYER):
            continue
        broken += [f"{module}:{line} calls {name}" for name, line in _engine_calls(path)]
    assert not broken, f"call rvfedprs.plan.run(plan) instead: {broken}"


def test_the_checks_see_what_they_look_for(tmp_path):
    """The two scanners find a nested import and an attribute call (they could fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f(engine):\n"
        "    from rvfedprs.genomic.engine import run_inprocess\n"
        "    engine.serve(1)\n"
        "    return run_inprocess()\n"
    )
    assert ("rvfedprs.genomic.engine.run_inprocess", 2) in _imports(probe)
    assert sorted(_engine_calls(probe)) == [("run_inprocess", 4), ("serve", 3)]

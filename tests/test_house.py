"""The house: one concern per module, without import circles, and heavy or UI libraries only
where they belong."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fi_patcher"
# Scripts run inside the target interpreter; fi-patch reads them as text and never imports them.
MODULES = {
    path.stem: path for path in PACKAGE.glob("*.py") if path.stem not in ("__init__", "__main__")
}


def imported(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in it (a function-level import counts too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "fi_patcher":
                names.update(f"fi_patcher.{alias.name}" for alias in node.names)
    return names


def own(names: set[str]) -> set[str]:
    return {n.split(".")[1] for n in names if n.startswith("fi_patcher.")} & set(MODULES)


def test_no_import_circles() -> None:
    graph = {name: own(imported(path)) for name, path in MODULES.items()}
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, " -> ".join((*trail, name))
        if name in done:
            return
        for after in sorted(graph[name]):
            visit(after, (*trail, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_libraries_stay_in_their_modules() -> None:
    allowed = {"typer": {"cli"}, "rich": {"cli", "render"}, "libcst": {"codemod"}}
    for library, modules in allowed.items():
        users = {
            name
            for name, path in MODULES.items()
            if any(n == library or n.startswith(library + ".") for n in imported(path))
        }
        assert users == modules, library


def test_the_target_scripts_use_the_standard_library_only() -> None:
    """What fi-patch runs in the target imports nothing of fi-patch and no third party, except
    what a proof imports from the target itself (torch, FlashInfer, packaging)."""
    folder = PACKAGE / "in_target"
    target = {"torch", "flashinfer", "packaging"}
    for path in folder.rglob("*.py"):
        for name in imported(path):
            top = name.split(".")[0]
            assert top != "fi_patcher", path
            assert top in target or top in sys.stdlib_module_names, (path, name)


def test_presentation_imports_the_results_never_the_orchestration() -> None:
    """render and documents show result values; nothing they import, directly or not, reads the
    target, plans, builds or writes."""
    orchestration = {"api", "writing", "protocol", "outcomes", "changes", "plan", "target"}
    orchestration |= {"store", "codemod", "assess"}
    for name in ("render", "documents"):
        reached, todo = set(), [name]
        while todo:
            for module in own(imported(MODULES[todo.pop()])) - reached:
                reached.add(module)
                todo.append(module)
        assert not reached & orchestration, (name, reached & orchestration)


def test_the_facade_is_short_and_every_function_fits_one_screen() -> None:
    assert len(MODULES["api"].read_text().splitlines()) < 300
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                assert length <= 60, f"{name}.{node.name} is {length} lines"


def test_no_private_imports_from_libraries() -> None:
    """typer's own click (`typer._click`) is private: its public `TyperException` is the way."""
    for name, path in MODULES.items():
        for module in imported(path):
            if not module.startswith(("fi_patcher", "__future__")):
                assert not any(p.startswith("_") for p in module.split(".")), (name, module)

"""The app's imports run one way: routing_policies never imports telemetry (telemetry reads
policies and calls rollout services, and plugs into `routing_policies.extensions`), and no
module of the app or of `controlplane` takes a `_private` name from another module."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "routing_policies"


def _modules(*folders: Path) -> list[Path]:
    paths = (path for folder in folders for path in folder.rglob("*.py"))
    return sorted(path for path in paths if "migrations" not in path.parts)


def _imports(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """Every import of a module, as (line, module imported from, names imported), relative
    imports resolved against the module's package."""
    package = path.relative_to(ROOT).parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield node.lineno, base, [alias.name for alias in node.names]


@pytest.mark.parametrize("path", _modules(APP), ids=lambda p: str(p.relative_to(ROOT)))
def test_routing_policies_module__imports__never_telemetry(path: Path) -> None:
    # Given a module of routing_policies (function-level imports included: ast.walk)
    # When its imports are read
    found = [
        f"line {line}: {module}"
        for line, module, _ in _imports(path)
        if module == "telemetry" or module.startswith("telemetry.")
    ]

    # Then none is of telemetry
    assert found == []


@pytest.mark.parametrize(
    "path", _modules(APP, ROOT / "controlplane"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_module__imports__no_private_name_of_another_module(path: Path) -> None:
    # Given a module of routing_policies or controlplane
    # When the names it imports from other modules are read
    found = [
        f"line {line}: {name} from {module}"
        for line, module, names in _imports(path)
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]

    # Then none is private to the module it comes from
    assert found == []


@pytest.mark.parametrize("path", _modules(APP), ids=lambda p: str(p.relative_to(ROOT)))
def test_routing_policies_module__imports__all_at_the_top(path: Path) -> None:
    # Given a module of routing_policies
    tree = ast.parse(path.read_text(), filename=str(path))

    # When the imports inside its functions are looked for
    found = [
        f"line {node.lineno}"
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]

    # Then there are none: no import waits for a call to dodge a cycle
    assert found == []

"""The arrows of DESIGN.md principle 1: cores are sans-IO, and layers only import downwards."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE_PACKAGES = ("partitions", "metadata", "groupcoord", "txn", "raftlog")
# Modules of a core package that are allowed to do I/O: raftlog's trio shell is the edge of that package.
IO_EDGE_MODULES = {"raftlog/shell.py"}
FORBIDDEN_IN_CORES = {"trio", "socket", "time", "random", "threading", "asyncio", "selectors", "os", "subprocess"}
# Which top-level packages each package may import (DESIGN.md layout; the edge depends on the cores).
ALLOWED_IMPORTS = {
    "partitions": {"partitions"},
    "metadata": {"metadata", "partitions"},
    "raftlog": {"raftlog", "partitions"},
    "groupcoord": {"groupcoord", "partitions", "metadata"},
    "txn": {"txn", "partitions", "metadata"},
    "net": {"net", "partitions", "metadata", "raftlog", "groupcoord", "txn"},
    "simulations": {"simulations", "net", "partitions", "metadata", "raftlog", "groupcoord", "txn"},
    "spark": {"spark", "net", "partitions"},
}
PACKAGES = set(ALLOWED_IMPORTS)


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def _modules(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", CORE_PACKAGES)
def test_core_packages_do_no_io(package):
    offenders = []
    for path in _modules(package):
        relative = path.relative_to(ROOT).as_posix()
        if relative in IO_EDGE_MODULES:
            continue
        for line, name in _imports(path):
            if name in FORBIDDEN_IN_CORES:
                offenders.append(f"{relative}:{line} imports {name}")
    assert not offenders, "cores must be sans-IO (DESIGN.md principle 1):\n" + "\n".join(offenders)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_packages_import_only_lower_layers(package):
    offenders = []
    for path in _modules(package):
        for line, name in _imports(path):
            if name in PACKAGES and name not in ALLOWED_IMPORTS[package]:
                offenders.append(f"{path.relative_to(ROOT).as_posix()}:{line} imports {name}")
    assert not offenders, "layering violated:\n" + "\n".join(offenders)


def test_the_architecture_check_catches_a_forbidden_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom trio import sleep\nimport partitions.batch\n")
    assert [name for _, name in _imports(sample)] == ["os", "trio", "partitions"]

"""The arrows of DESIGN.md principle 1: cores are sans-IO, and layers only import downwards.

The layers, bottom to top (a layer may import itself and the layers its entry names, nothing else):

    partitions                      the log, the record-batch codec, the Storage port, Kafka's error table
    net.protocol                    the Kafka wire codec (sans-IO; it lives under net/ beside the client)
    metadata, raftlog, coordinator  the metadata image and controller, the Raft framework, the coordinator runtime
    groupcoord, txn                 the coordinators (they never import each other)
    broker                          the sans-IO broker and node composition
    net                             the edge: trio servers, node runtime, file storage, the Kafka client
    simulations, spark, cli, bench  on top (cli may run the simulator)

A module belongs to the longest unit its dotted name starts with (`net.protocol.codec` is in `net.protocol`,
`net.server` in `net`), and an import names the unit of the module it imports.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE_UNITS = ("partitions", "net.protocol", "security", "metadata", "raftlog", "coordinator", "groupcoord", "txn",
              "broker")
# Modules of a core unit that are allowed to do I/O: raftlog's trio shell is the edge of that package, and the
# config loader reads the one file a node starts from.
IO_EDGE_MODULES = {"raftlog/shell.py", "broker/config.py", "broker/security_config.py"}
FORBIDDEN_IN_CORES = {"trio", "socket", "time", "random", "threading", "asyncio", "selectors", "os", "subprocess"}
_BELOW_COORDINATORS = {"partitions", "net.protocol", "security", "metadata", "coordinator"}
_BELOW_BROKER = _BELOW_COORDINATORS | {"raftlog", "groupcoord", "txn"}
_BELOW_NET = _BELOW_BROKER | {"broker"}
_BELOW_TOP = _BELOW_NET | {"net"}
ALLOWED_IMPORTS = {
    "partitions": set(),
    "net.protocol": {"partitions"},
    "security": {"partitions"},
    "metadata": {"partitions", "security"},
    "raftlog": {"partitions"},
    "coordinator": {"partitions"},
    "groupcoord": _BELOW_COORDINATORS,
    "txn": _BELOW_COORDINATORS,
    "broker": _BELOW_BROKER,
    "net": _BELOW_NET,
    "simulations": _BELOW_TOP,
    "spark": _BELOW_TOP,
    "cli": _BELOW_TOP | {"simulations"},
    "flotilla_testing": _BELOW_TOP | {"cli"},
    "bench": _BELOW_TOP | {"simulations", "cli", "spark", "flotilla_testing"},
}
UNITS = set(ALLOWED_IMPORTS)


def unit_of(dotted: str) -> str | None:
    """The layer unit of a module name: the longest unit that is the name or a dotted prefix of it."""
    best = None
    for unit in UNITS:
        if (dotted == unit or dotted.startswith(unit + ".")) and (best is None or len(unit) > len(best)):
            best = unit
    return best


def _imports(path: pathlib.Path):
    """(line, dotted module name) of every absolute import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from net import protocol` imports the unit net.protocol; `from net.server import X` the unit net.
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules_of(unit: str):
    top = ROOT / unit.split(".")[0]
    return sorted(path for path in top.rglob("*.py") if unit_of(_module_name(path)) == unit)


def layering_violations(paths) -> list[str]:
    """Every import in `paths` that reaches a unit its own unit may not import, as "file:line imports name"."""
    offenders = []
    for path in paths:
        own = unit_of(_module_name(path))
        for line, name in _imports(path):
            target = unit_of(name)
            if target is None or target == own:
                continue
            if target not in ALLOWED_IMPORTS[own]:
                offenders.append(f"{path.relative_to(ROOT).as_posix()}:{line} imports {name} ({own} -> {target})")
    return sorted(set(offenders))


@pytest.mark.parametrize("unit", CORE_UNITS)
def test_core_packages_do_no_io(unit):
    offenders = []
    for path in _modules_of(unit):
        relative = path.relative_to(ROOT).as_posix()
        if relative in IO_EDGE_MODULES:
            continue
        for line, name in _imports(path):
            if name.split(".")[0] in FORBIDDEN_IN_CORES:
                offenders.append(f"{relative}:{line} imports {name}")
    assert not offenders, "cores must be sans-IO (DESIGN.md principle 1):\n" + "\n".join(offenders)


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_packages_import_only_lower_layers(unit):
    offenders = layering_violations(_modules_of(unit))
    assert not offenders, "layering violated:\n" + "\n".join(offenders)


def test_every_package_has_a_layer():
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages <= UNITS, f"packages without a layer in ALLOWED_IMPORTS: {sorted(packages - UNITS)}"


def test_the_architecture_check_catches_a_forbidden_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom trio import sleep\nimport partitions.batch\n")
    assert [name for _, name in _imports(sample)] == ["os", "trio.sleep", "partitions.batch"]


@pytest.mark.parametrize("unit, source, target", [
    ("partitions", "import metadata.image\n", "metadata"),
    ("groupcoord", "from txn import producer_state\n", "txn"),
    ("coordinator", "from broker.core import BrokerCore\n", "broker"),
    ("broker", "from net.server import serve\n", "net"),
    ("net.protocol", "import net.client.aio\n", "net"),
    ("net", "from cli.main import main\n", "cli"),
    ("simulations", "import spark.source\n", "spark"),
])
def test_an_upward_import_is_named(tmp_path, monkeypatch, unit, source, target):
    """Plant an upward import in a module of `unit` and see the layering check name it."""
    package = ROOT / unit.replace(".", "/")
    planted = package / "_planted_upward_import.py"
    planted.write_text(source)
    try:
        offenders = layering_violations([planted])
    finally:
        planted.unlink()
    assert len(offenders) == 1 and offenders[0].endswith(f"({unit} -> {target})"), offenders


def test_a_downward_import_passes():
    planted = ROOT / "broker" / "_planted_downward_import.py"
    planted.write_text("from net.protocol.codec import ApiKey\nimport partitions.batch\nfrom coordinator import runtime\n")
    try:
        assert layering_violations([planted]) == []
    finally:
        planted.unlink()

"""Every package directory is listed in pyproject.toml, so a wheel (not only an editable install) works."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_package_directory_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in ROOT.rglob("__init__.py")
        if path.parent.relative_to(ROOT).parts[0] not in ("tests", "build", ".git")
        and not any(part.startswith(".") or part.endswith(".egg-info") for part in path.parts)
    }
    assert found == listed, f"missing from pyproject: {sorted(found - listed)}; stale: {sorted(listed - found)}"


def test_every_bench_script_puts_the_repository_root_first_on_sys_path():
    """`python bench/x.py` puts bench/ first on sys.path, where bench/partitions.py shadows the partitions
    package: a script that imports the project must insert the repository root before it does."""
    import re

    project = ("partitions", "net", "broker", "metadata", "cli", "tests", "groupcoord", "txn", "spark", "raftlog")
    for script in sorted((ROOT / "bench").glob("*.py")):
        text = script.read_text()
        imports = [m.start() for m in re.finditer(rf"^\s*(from|import) ({'|'.join(project)})\b", text, re.M)]
        if not imports:
            continue
        insert = text.find("sys.path.insert(0,")
        assert 0 <= insert < min(imports), f"{script.name}: imports the project before putting the root on sys.path"

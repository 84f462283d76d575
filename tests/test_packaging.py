"""Packaging: every package directory is listed in pyproject.toml, so a wheel (not only an editable install) works;
bench scripts find the project before a bench module shadows it; the README's set-up commands are what CI runs."""

import pathlib
import re
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
    project = ("partitions", "net", "broker", "metadata", "cli", "tests", "groupcoord", "txn", "spark", "raftlog")
    for script in sorted((ROOT / "bench").glob("*.py")):
        text = script.read_text()
        imports = [m.start() for m in re.finditer(rf"^\s*(from|import) ({'|'.join(project)})\b", text, re.M)]
        if not imports:
            continue
        insert = text.find("sys.path.insert(0,")
        assert 0 <= insert < min(imports), f"{script.name}: imports the project before putting the root on sys.path"


def _readme_set_up_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Set up"):readme.index("## First steps")]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_ci_runs_the_readme_test_command():
    """CI runs what the README tells a newcomer to paste, only quieter (`-q`, `-qq`, output to /dev/null)."""
    commands = _readme_set_up_commands()
    assert len(commands) == 2 and "\n" not in "".join(commands), commands  # one line each, to paste
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("apt-get update")]
    assert len(ci) == 1, ci
    quiet = re.sub(r" -qq?(?= )| >/dev/null", "", ci[0])  # pytest keeps its own -q, at the end
    assert quiet == commands[1], f"\n.ci/run:  {quiet}\nREADME:   {commands[1]}"


def test_the_set_up_commands_install_into_a_virtual_environment():
    """A distribution's Python refuses `pip install` beside its own packages (PEP 668): both commands make and
    activate .venv first, and the test command installs the venv module where the distribution packs it apart."""
    up, tests = _readme_set_up_commands()
    for command in (up, tests):
        assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e " in command, command
    assert up.endswith("&& flotilla up") and tests.split(" && ")[-1].startswith("python3 -m pytest ")
    assert tests.endswith(" -q"), tests
    install = next(step for step in tests.split(" && ") if step.startswith("apt-get install"))
    assert "python3-venv" in install.split(), install

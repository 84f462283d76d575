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

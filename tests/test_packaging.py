"""The install files agree, and the README's commands are the ones CI runs."""
import re

import pytest
import yaml
from conftest import REPO_ROOT

CONDA_TO_PIP = {"pytorch": "torch"}
CONDA_ONLY = {"python", "pip"}


def _split(requirement: str) -> tuple[str, str]:
    """(name, version spec); pip's extras ("dask[distributed]") are dropped: conda has no
    extras, and its package of that name brings them (conda's dask includes distributed)."""
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)$", requirement).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    pip_deps = {}
    for name, spec in map(_split, requirements):
        assert pip_deps.setdefault(name, spec) == spec, f"{name} has two different versions in pyproject.toml"
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    conda_deps = {}
    for item in env["dependencies"]:
        if isinstance(item, str):
            name, spec = _split(item)
            if name not in CONDA_ONLY:
                conda_deps[CONDA_TO_PIP.get(name, name)] = spec
    assert conda_deps == pip_deps
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict))
    assert "-e ." in pip_section, "environment.yml must install the course's own packages"


def test_readme_starts_with_the_demo_and_test_commands_and_ci_runs_the_test_command():
    readme = (REPO_ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:bash|sh)?\n(.*?)```", readme, re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert commands[:2] == ["make demo", "make test"]
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "-m autograder demo" in makefile and "-m pytest" in makefile


def test_grading_workspace_is_ignored_by_git():
    ignored = (REPO_ROOT / ".gitignore").read_text().split()
    assert "grading/" in ignored and ".venv/" in ignored

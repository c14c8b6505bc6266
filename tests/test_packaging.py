"""The install files agree, every module a notebook imports is a declared student
dependency, and the README's commands are the ones CI runs."""
import ast
import importlib.metadata
import json
import re
import sys

import pytest
import yaml
from conftest import REPO_ROOT

from autograder.course import config

CONDA_TO_PIP = {"pytorch": "torch"}
CONDA_ONLY = {"python", "pip"}


def _split(requirement: str) -> tuple[str, str]:
    """(name, version spec); pip's extras ("dask[distributed]") and environment markers
    ("; python_version < '3.11'") are dropped: conda has neither, and its package of that
    name brings the extras (conda's dask includes distributed)."""
    requirement = requirement.split(";")[0].split("#")[0]
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)$", requirement).groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = config.pyproject()["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    pip_deps = {}
    for name, spec in map(_split, requirements):
        assert pip_deps.setdefault(name, spec) == spec, f"{name} has two different versions in pyproject.toml"
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    conda_deps, conda_only = {}, {}
    for item in env["dependencies"]:
        if isinstance(item, str):
            name, spec = _split(item)
            if name in CONDA_ONLY:
                conda_only[name] = spec
            else:
                conda_deps[CONDA_TO_PIP.get(name, name)] = spec
    assert conda_deps == pip_deps  # the same packages, each with the same floor (and cap)
    assert conda_only["python"] == project["requires-python"].replace(" ", "")
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict))
    assert "-e ." in pip_section, "environment.yml must install the course's own packages"


# A notebook runs in an IPython kernel: ipykernel (the `lab` extra) and Colab bring IPython.
KERNEL_DISTRIBUTIONS = {"ipython"}


def _optional(tree) -> set[int]:
    """ids of the import nodes inside a `try` that catches their absence (the bootstrap's
    `import google.colab`, which only Colab has)."""
    optional = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            optional |= {id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return optional


def notebook_imports() -> dict[str, set[str]]:
    """Top-level module -> the notebooks (release and solution) that import it, outside optional imports."""
    found: dict[str, set[str]] = {}
    for path in sorted([*REPO_ROOT.glob("notebooks/*/*.ipynb"), *REPO_ROOT.glob("solutions/*/*.ipynb")]):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            tree = ast.parse(source)
            skip = _optional(tree)
            for node in ast.walk(tree):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    found.setdefault(module.split(".")[0], set()).add(path.relative_to(REPO_ROOT).as_posix())
    return found


def test_every_third_party_import_in_the_notebooks_is_a_declared_student_dependency():
    """A student's environment (Colab, or the student distribution's requirements.txt) has the
    run-time `dependencies` of pyproject.toml: a notebook may import nothing else."""
    declared = {_split(r)[0] for r in config.requirements().run} | KERNEL_DISTRIBUTIONS
    own = {package.split(".")[0] for package in config.pyproject()["tool"]["setuptools"]["packages"]}
    providers = importlib.metadata.packages_distributions()
    imports = notebook_imports()
    assert {"torch", "utils"} <= set(imports), "the scan found no imports: is it reading the notebooks?"
    undeclared = {}
    for module, where in sorted(imports.items()):
        if module in sys.stdlib_module_names or module in own:
            continue
        distributions = {_split(d)[0] for d in providers.get(module, [])}
        if not distributions & declared:
            undeclared[module] = (sorted(distributions) or "not installed here", sorted(where))
    assert not undeclared, (
        "modules imported by notebooks but not in [project] dependencies of pyproject.toml "
        f"(a student's environment lacks them): {undeclared}"
    )


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
    # anchored: the default workspace at the top only, never the grader's autograder/grading/ stage
    assert "/grading/" in ignored and "grading/" not in ignored and ".venv/" in ignored

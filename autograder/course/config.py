"""pyproject.toml, read in one place: the course's [tool.course] table and its dependencies.

Everything that follows pyproject.toml reads it here: `student-cells` (the Colab badges
and bootstrap), `release` (the manifest, which carries the run-time requirements to the
Colab bootstrap, `utils.colab.prepare`), and `dist` (requirements.txt, environment.yml).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from autograder.course.layout import REPO_ROOT, CourseError
from utils.submission import PLACEHOLDER_MARK  # the students' check_submission() knows it too

try:
    import tomllib
except ImportError:  # Python 3.10: pyproject.toml asks for tomli there
    import tomli as tomllib

__all__ = ["PLACEHOLDER_MARK", "PYPROJECT", "CourseConfig", "Requirements", "load_config", "pyproject", "requirements"]

PYPROJECT = REPO_ROOT / "pyproject.toml"


@lru_cache(maxsize=4)
def pyproject(path: Path = PYPROJECT) -> dict:
    """The parsed pyproject.toml (read once per process)."""
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


@dataclass
class CourseConfig:
    repository: str
    branch: str = "main"
    gpu_notebooks: list[str] = field(default_factory=list)

    @property
    def placeholder(self) -> bool:
        return PLACEHOLDER_MARK in self.repository

    @property
    def github_slug(self) -> str:
        """owner/name of a GitHub address (Colab opens notebooks from GitHub)."""
        m = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", self.repository)
        if not m:
            raise CourseError(
                f"[tool.course] repository = {self.repository!r} is not a GitHub address "
                "(https://github.com/OWNER/NAME); Colab's badge can only open notebooks from GitHub"
            )
        return f"{m.group(1)}/{m.group(2)}"

    def colab_url(self, name: str) -> str:
        return f"https://colab.research.google.com/github/{self.github_slug}/blob/{self.branch}/notebooks/{name}/{name}.ipynb"


def load_config(path: Path = PYPROJECT) -> CourseConfig:
    """The [tool.course] table of pyproject.toml."""
    table = pyproject(path).get("tool", {}).get("course")
    if not table or not table.get("repository"):
        raise CourseError(f"{path}: set [tool.course] repository = \"https://github.com/OWNER/NAME\"")
    config = CourseConfig(str(table["repository"]), str(table.get("branch", "main")), list(table.get("gpu_notebooks", [])))
    config.github_slug  # validates the address
    return config


@dataclass
class Requirements:
    """What a student installs: `run` is [project] dependencies (what a notebook imports,
    and all that Colab gets), `lab` the local front end (the `lab` extra)."""

    run: list[str]
    lab: list[str]

    @property
    def student(self) -> list[str]:
        """requirements.txt of the student distribution."""
        return self.run + self.lab


def requirements(path: Path = PYPROJECT) -> Requirements:
    project = pyproject(path)["project"]
    return Requirements(list(project["dependencies"]), list(project.get("optional-dependencies", {}).get("lab", [])))

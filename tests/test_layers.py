"""The grader's layers (autograder/*/__init__.py): each stage imports only the stages below it, nothing
imports the command line, and only autograder/isolation/ runs student code."""
from __future__ import annotations

import ast
from pathlib import Path

from autograder.course.layout import REPO_ROOT

# Lowest first: a stage may import itself and the stages before it.
STAGES = ("course", "isolation", "handins", "grading", "release", "reports", "quality")
TOP = {"__init__.py", "__main__.py", "cli.py"}
CATALOG = "mutants"  # the mutant catalog's folder (data only), where COURSE_SPEC.md puts it
# Starting a kernel, talking to one, or executing code: isolation/ only.
KERNEL_PACKAGES = ("jupyter_client", "nbclient", "ipykernel", "nbconvert.preprocessors.execute")
EXECUTING_CALLS = ("exec", "eval", "compile", "builtins.exec", "builtins.eval", "builtins.compile")


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """Every module the code names: import statements anywhere (in functions too), and string
    constants that are a dotted path of the package (`python -m autograder.x`, preload lists)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.count(".") >= 2 or not node.module.startswith(package):  # from a module
                found.append((node.lineno, node.module))
            else:  # from the package or a stage: what it imports may be a module
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.startswith(package + ".") and all(p.isidentifier() for p in text.split(".")):
                found.append((node.lineno, text))
    return found


def _stage(module: str, package: str) -> str | None:
    """The stage folder of a dotted name inside the package; None for the top (cli, __main__)."""
    parts = module.split(".")
    if parts[0] != package or len(parts) < 2:
        return None
    return parts[1] if parts[1] in STAGES else None


def layer_violations(package_dir: Path) -> list[str]:
    """What breaks the layers in the package at `package_dir` (empty when it keeps them)."""
    package = package_dir.name
    problems = []
    for entry in sorted(package_dir.iterdir()):
        if entry.name == "__pycache__":
            continue
        if entry.is_file() and entry.name not in TOP:
            problems.append(f"{entry.name}: a module at the top; it belongs in a stage folder")
        elif entry.is_dir() and entry.name not in STAGES:
            if entry.name == CATALOG and not any(entry.rglob("*.py")):
                continue
            problems.append(f"{entry.name}/: not a stage folder ({', '.join(STAGES)})")
    for path in sorted(package_dir.rglob("*.py")):
        name = _module_name(path, package_dir)
        own = _stage(name, package)
        tree = ast.parse(path.read_text(), filename=str(path))
        where = f"{path.relative_to(package_dir.parent).as_posix()}"
        for line, target in _imports(tree, package):
            if target == f"{package}.cli" or target.startswith(f"{package}.cli."):
                if name != f"{package}.__main__":
                    problems.append(f"{where}:{line} imports the command line ({target})")
                continue
            other = _stage(target, package)
            if own and other and STAGES.index(other) > STAGES.index(own):
                problems.append(f"{where}:{line}: {own} imports {target}, of the higher stage {other}")
            if own != "isolation" and any(target == k or target.startswith(k + ".") for k in KERNEL_PACKAGES):
                problems.append(f"{where}:{line}: {target} outside isolation/ (it starts or drives a kernel)")
        if own != "isolation":
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and ast.unparse(node.func) in EXECUTING_CALLS:
                    problems.append(f"{where}:{node.lineno}: {ast.unparse(node.func)}() outside isolation/ (it runs code)")
    return problems


def test_the_grader_keeps_its_layers():
    problems = layer_violations(REPO_ROOT / "autograder")
    assert not problems, "\n".join(problems)


def test_every_stage_says_what_it_does_and_what_it_may_import():
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((REPO_ROOT / "autograder" / stage / "__init__.py").read_text()))
        assert doc and "import" in doc, f"autograder/{stage}/__init__.py: say what the stage does and may import"


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "autograder"
    for name in (*TOP, *(f"{stage}/__init__.py" for stage in STAGES)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text('"""May import nothing."""\n')
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_layer_check_finds_each_kind_of_violation(tmp_path):
    """The check itself can fail: each rule, broken once in a small package of the same shape."""
    root = _package(tmp_path, {
        "isolation/sandbox.py": "def f():\n    from autograder.grading import workspace\n",
        "course/layout.py": "COMMAND = 'autograder.reports.export'\n",
        "reports/page.py": "from autograder import cli\n",
        "grading/runs.py": "import jupyter_client\nexec('1')\n",
        "helpers.py": "",
        "extra/thing.py": "",
        "grading/fine.py": "from autograder.isolation import sandbox\nfrom autograder.grading import runs\n",
    })
    problems = "\n".join(layer_violations(root))
    assert "autograder/isolation/sandbox.py:2: isolation imports autograder.grading" in problems
    assert "autograder/course/layout.py:1: course imports autograder.reports.export" in problems
    assert "autograder/reports/page.py:1 imports the command line" in problems
    assert "autograder/grading/runs.py:1: jupyter_client outside isolation/" in problems
    assert "autograder/grading/runs.py:2: exec() outside isolation/" in problems
    assert "helpers.py: a module at the top" in problems
    assert "extra/: not a stage folder" in problems
    assert "grading/fine.py" not in problems
    assert layer_violations(_package(tmp_path / "clean", {"grading/fine.py": "from autograder.course import layout\n"})) == []

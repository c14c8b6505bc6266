"""Precision and recall of `report`'s similarity (autograder/reports/similarity.py) on a synthetic class.

    python benchmarks/grader/similarity.py [--honest 60] [--copies 24] [--seed 0] [--out similarity]

For every assignment, a class of --honest independent students: each answer cell is the
solution's code, one of the catalog's correct variants or one of its bugs (autograder/mutants/,
really different code), drawn at random, one cell in ten left as the release gave it, no two
students with more than three identical answers (a quarter of the cells where that is fewer).
Then --copies planted copies, each of a different honest student, a third at each strength of
disguise (`disguise`: light, medium, heavy, made from the syntax tree), each of 60 to 100% of
its source's cells, the others answered honestly; each copy is run against its source
(`equivalent`) and made again when it does not compute the same. The positives are the planted
pairs; every other pair is a negative.

The threshold is tuned on the first three assignments (the multiple of 0.05 with the best F1
there) and precision and recall (per strength) are reported on the other four at that
threshold, and at autograder.reports.similarity.THRESHOLD (the value the report uses, set from this
benchmark). Writes benchmarks/results/NAME.json (--out).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import random
import re
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.reports import similarity  # noqa: E402
from autograder.reports.similarity import answer_cells  # noqa: E402
from autograder.course.layout import assignments, read_notebook, release_path, solution_path  # noqa: E402
from autograder.quality.mutants import default_catalogs, load_catalogs  # noqa: E402
from benchmarks.machine import save  # noqa: E402

TUNE = 3  # the first TUNE assignments tune the threshold; the others are held out


def variants(assignment: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Per answer cell: the independent answers (solution, correct variants, bugs); and the release's cells."""
    solution = answer_cells(read_notebook(solution_path(assignment)))
    pool = {cell: [source] for cell, source in solution.items()}
    for m in load_catalogs(default_catalogs()):
        if m.assignment == assignment and m.cell in pool:
            pool[m.cell].append(m.source)
    return pool, answer_cells(read_notebook(release_path(assignment)))


def honest_class(pool: dict[str, list[str]], given: dict[str, str], n: int, rng: random.Random) -> dict[str, dict]:
    """Up to n students, each cell drawn at random (one in ten left as the release gave it), with
    no two students handing in the same catalog text in more than a quarter of the cells (three at most):
    independent students do not hand in identical code, and the catalog has only so many answers
    per cell (and never more than three identical answers). Stops short of n when 500 draws in a row find no such student."""
    most = min(3, max(1, len(pool) // 4))
    students: dict[str, dict] = {}
    for _ in range(500 * n):
        if len(students) == n:
            break
        cells = {cell: (given[cell] if rng.random() < 0.1 else rng.choice(options)) for cell, options in pool.items()}
        if all(sum(cells[c] == other[c] and cells[c] != given[c] for c in pool) <= most for other in students.values()):
            students[f"honest-{len(students):03d}"] = cells
    return students


# ------------------------------------------------------------------ what a copier changes
# Every disguise works on syntax trees (ast), so what it writes parses and computes what its
# source computes: renames are consistent across the hand-in's cells, a reordered pair of
# statements reads and writes no name of the other, a swapped spelling is an equivalence of
# PyTorch or Python (x.shape[i] and x.size(i), a @ b and torch.matmul(a, b), ...), a rewritten
# loop and an extracted helper keep every value. `equivalent` checks each copy by running it.

STRENGTHS = ("light", "medium", "heavy")


def _names_given(given: dict[str, str]) -> set[str]:
    """Every word of the release's cells (its functions, classes, methods, arguments and the
    attributes its docstrings ask for): the names the tests use, which a copier keeps."""
    return set(re.findall(r"\w+", "\n".join(given.values())))


def _bound(tree: ast.AST) -> set[str]:
    """Variables, arguments, functions and classes a tree binds."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    names |= {d.name for d in ast.walk(tree) if isinstance(d, (ast.FunctionDef, ast.ClassDef))}
    return names - {"self", "cls", "__class__"}


def _attributes(tree: ast.AST) -> set[str]:
    """Attributes a hand-in sets on self, and the methods it defines."""
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
             and isinstance(n.value, ast.Name) and n.value.id == "self"}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names |= {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
    return {n for n in names if not n.startswith("__")}


class _Rename(ast.NodeTransformer):
    def __init__(self, new: dict[str, str], attrs: dict[str, str]):
        self.new, self.attrs = new, attrs

    def visit_Name(self, node):
        node.id = self.new.get(node.id, node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.new.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node):
        node.name = self.attrs.get(node.name, self.new.get(node.name, node.name))
        return self.generic_visit(node)

    def visit_ClassDef(self, node):
        node.name = self.new.get(node.name, node.name)
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        node.attr = self.attrs.get(node.attr, node.attr)
        return self.generic_visit(node)

    def visit_Call(self, node):  # f(dim=1) keeps dim unless f is the hand-in's own function
        func = node.func
        target = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if target in self.own:
            for kw in node.keywords:
                kw.arg = self.new.get(kw.arg, kw.arg)
        return self.generic_visit(node)


def _trees(cells: dict[str, str]) -> dict[str, ast.Module | None]:
    out = {}
    for cell, source in cells.items():
        try:
            out[cell] = ast.parse(source)
        except SyntaxError:
            out[cell] = None
    return out


def rename(cells: dict[str, str], rng: random.Random, given: dict[str, str] | None = None) -> dict[str, str]:
    """Every name the hand-in binds and every attribute and method it defines renamed, the same
    way in every cell, except what the release defines (`given`: the tests call those); comments,
    docstrings and layout are gone (the code is rewritten from its syntax tree)."""
    keep = _names_given(given or {})
    trees = _trees(cells)
    bound = set().union(*(_bound(t) for t in trees.values() if t))
    attrs = set().union(*(_attributes(t) for t in trees.values() if t))
    words = ["my", "tmp", "val", "res", "the", "cur", "out", "new"]
    new = {n: f"{rng.choice(words)}_{n[::-1].strip('_')}{rng.randint(0, 99)}" for n in sorted(bound - keep)}
    new_attrs = {n: f"{rng.choice(words)}_{n.strip('_')[:3]}{rng.randint(0, 99)}" for n in sorted(attrs - keep)}
    renamer = _Rename(new, new_attrs)
    renamer.own = {d.name for t in trees.values() if t for d in ast.walk(t)
                   if isinstance(d, (ast.FunctionDef, ast.ClassDef))}
    out = {}
    for cell, tree in trees.items():
        if tree is None:
            out[cell] = cells[cell]
            continue
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
                body[0].value.value = rng.choice(["My answer.", "Computes the result as in the lecture.", "TODO: tidy"])
        out[cell] = ast.unparse(renamer.visit(tree))
    return out


def reformat(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Two-space indents, a blank line after every block opener, spaces after commas doubled."""
    out = {}
    for cell, source in cells.items():
        lines = []
        for line in source.splitlines():
            stripped = line.lstrip(" ")
            indent = (len(line) - len(stripped)) // 2
            lines.append(" " * indent + stripped.replace(", ", " ,  ") + "   ")
            if stripped.rstrip().endswith(":") and not stripped.startswith("#"):
                lines.append("")
        out[cell] = "\n".join(lines)
    return out


def recomment(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """The comments taken out, others put in."""
    out = {}
    for cell, source in cells.items():
        lines = []
        for line in source.splitlines():
            if line.strip().startswith("#"):
                continue
            if rng.random() < 0.3 and line.strip():
                lines.append(re.match(r"\s*", line).group() + f"# step {rng.randint(1, 99)}: as in the lecture")
            lines.append(line)
        out[cell] = "\n".join(lines)
    return out


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    def names(node, stored):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) == stored}
    return not (names(a, True) & (names(b, True) | names(b, False)) or names(b, True) & names(a, False))


def _pure_assign(stmt: ast.stmt) -> bool:
    """x = ... storing plain names, with no call that could change what the other statement reads."""
    return isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets) \
        and not any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Await, ast.Yield)) for n in ast.walk(stmt.value)) \
        or isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets) \
        and all(_harmless_call(n) for n in ast.walk(stmt.value) if isinstance(n, ast.Call))


_HARMLESS = {"len", "range", "int", "float", "min", "max", "abs", "sqrt", "size", "zeros", "ones", "arange",
             "full", "softmax", "matmul", "transpose", "view", "reshape", "sum", "mean", "exp", "log", "tensor"}


def _harmless_call(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _HARMLESS


def _blocks(tree: ast.AST):
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body


def reorder(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Neighbouring assignments that neither read nor write each other's names swapped."""
    out = {}
    for cell, tree in _trees(cells).items():
        if tree is None:
            out[cell] = cells[cell]
            continue
        for body in _blocks(tree):
            i = 0
            while i + 1 < len(body):
                a, b = body[i], body[i + 1]
                if _pure_assign(a) and _pure_assign(b) and _independent(a, b):
                    body[i], body[i + 1] = b, a
                    i += 2
                else:
                    i += 1
        out[cell] = ast.unparse(tree)
    return out


def _call(func: str, args: list, keywords: list | None = None) -> ast.Call:
    return ast.Call(ast.parse(func, mode="eval").body, args, keywords or [])


class _Spellings(ast.NodeTransformer):
    """Equivalent spellings swapped, each occurrence with probability `share`."""

    def __init__(self, rng: random.Random, share: float):
        self.rng, self.share = rng, share

    def _go(self) -> bool:
        return self.rng.random() < self.share

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult) and self._go():
            return _call("torch.matmul", [node.left, node.right])
        return node

    def visit_Subscript(self, node):  # x.shape[i] -> x.size(i)
        self.generic_visit(node)
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" and isinstance(node.ctx, ast.Load) \
                and isinstance(node.slice, (ast.Constant, ast.UnaryOp, ast.Name)) and self._go():
            return ast.Call(ast.Attribute(node.value.value, "size", ast.Load()), [node.slice], [])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if not self._go():
            return node
        if isinstance(func, ast.Attribute) and func.attr == "size" and len(node.args) == 1 and not node.keywords:
            return ast.Subscript(ast.Attribute(func.value, "shape", ast.Load()), node.args[0], ast.Load())
        if isinstance(func, ast.Attribute) and func.attr == "matmul" and isinstance(func.value, ast.Name) \
                and func.value.id == "torch" and len(node.args) == 2 and not node.keywords:
            return ast.BinOp(node.args[0], ast.MatMult(), node.args[1])
        if isinstance(func, ast.Attribute) and func.attr in ("softmax", "log_softmax", "exp", "sum", "mean", "log") \
                and isinstance(func.value, ast.Name) and func.value.id in ("torch", "F") and node.args:
            # F.softmax(x, dim=1) -> x.softmax(dim=1); torch.exp(x) -> x.exp()
            if func.attr in ("exp", "log", "sum", "mean") and func.value.id == "F":
                return node
            rest = [ast.keyword("dim", node.args[1])] if len(node.args) == 2 else []
            if len(node.args) > 2:
                return node
            return ast.Call(ast.Attribute(node.args[0], func.attr, ast.Load()), [], rest + node.keywords)
        if isinstance(func, ast.Attribute) and func.attr in ("softmax", "log_softmax") \
                and not (isinstance(func.value, ast.Name) and func.value.id in ("torch", "F")) and not node.args \
                and node.keywords:  # x.softmax(dim=1) -> torch.softmax(x, dim=1)
            return _call(f"torch.{func.attr}", [func.value], node.keywords)
        if isinstance(func, ast.Attribute) and func.attr == "view" and node.args:
            func.attr = "reshape"
        elif isinstance(func, ast.Attribute) and func.attr == "transpose" and len(node.args) == 2 \
                and all(isinstance(a, (ast.Constant, ast.UnaryOp)) for a in node.args):
            node.args = node.args[::-1]
        return node

    def visit_AugAssign(self, node):  # x += y -> x = x + y (out of place: never changes what x aliases)
        self.generic_visit(node)
        if isinstance(node.target, ast.Name) and self._go():
            return ast.Assign([ast.Name(node.target.id, ast.Store())],
                              ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value))
        return node


def swap_spellings(cells: dict[str, str], rng: random.Random, share: float = 0.5) -> dict[str, str]:
    out = {}
    for cell, tree in _trees(cells).items():
        out[cell] = cells[cell] if tree is None else ast.unparse(ast.fix_missing_locations(_Spellings(rng, share).visit(tree)))
    return out


def _functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.body]


def dead_statement(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """One statement whose value is never used, at the start of one function."""
    trees = _trees(cells)
    places = [(c, f) for c, t in trees.items() if t for f in _functions(t) if f.args.args]
    out = dict(cells)
    if places:
        cell, f = rng.choice(places)
        arg = f.args.args[-1].arg
        f.body.insert(0, ast.parse(rng.choice([f"unused_{arg} = {arg}", "debug = False", "step_count = 0"])).body[0])
        out[cell] = ast.unparse(trees[cell])
    return out


def _loops(tree: ast.Module, rng: random.Random) -> bool:
    """One loop rewritten: y = [e for x in xs] as a loop with append, a loop with append as a
    comprehension, or for i in range(n) as a while loop. Whether one was."""
    for body in _blocks(tree):
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and isinstance(stmt.value, ast.ListComp) and len(stmt.value.generators) == 1 \
                    and not stmt.value.generators[0].ifs:
                name, comp = stmt.targets[0].id, stmt.value
                loop = ast.For(comp.generators[0].target, comp.generators[0].iter,
                               [ast.Expr(_call(f"{name}.append", [comp.elt]))], [])
                body[i:i + 1] = [ast.parse(f"{name} = []").body[0], loop]
                return True
            if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and not stmt.orelse \
                    and isinstance(stmt.iter, ast.Call) and isinstance(stmt.iter.func, ast.Name) \
                    and stmt.iter.func.id == "range" and len(stmt.iter.args) == 1 \
                    and not any(isinstance(n, (ast.Continue, ast.Break)) for n in ast.walk(stmt)) \
                    and stmt.target.id not in {n.id for s in stmt.body for n in ast.walk(s)
                                               if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}:
                i_name, bound = stmt.target.id, stmt.iter.args[0]
                loop = ast.While(ast.Compare(ast.Name(i_name, ast.Load()), [ast.Lt()], [bound]),
                                 [*stmt.body, ast.parse(f"{i_name} = {i_name} + 1").body[0]], [])
                if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
                    continue  # a return leaves both loops alike, but the counter after it would differ: keep it simple
                body[i:i + 1] = [ast.parse(f"{i_name} = 0").body[0], loop]
                return True
    return False


def rewrite_loops(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    out = {}
    for cell, tree in _trees(cells).items():
        out[cell] = ast.unparse(ast.fix_missing_locations(tree)) if tree and _loops(tree, rng) else cells[cell]
    return out


def _locals(f: ast.FunctionDef) -> set[str]:
    return {a.arg for a in ast.walk(f.args) if isinstance(a, ast.arg)} | \
        {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def extract_helper(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """The value of one assignment in a function moved into a new top-level helper function,
    called with the function's local names that the value reads."""
    trees = _trees(cells)
    places = []
    for cell, tree in trees.items():
        for top in (tree.body if tree else []):
            funcs = [top] if isinstance(top, ast.FunctionDef) else \
                [f for f in top.body if isinstance(f, ast.FunctionDef)] if isinstance(top, ast.ClassDef) else []
            for f in funcs:
                for i, stmt in enumerate(f.body):
                    if isinstance(stmt, (ast.Assign, ast.Return)) and stmt.value is not None \
                            and isinstance(stmt.value, (ast.Call, ast.BinOp)) \
                            and not any(isinstance(n, (ast.Lambda, ast.comprehension, ast.NamedExpr, ast.Starred))
                                        for n in ast.walk(stmt.value)):
                        places.append((cell, tree, top, f, stmt))
    out = dict(cells)
    if not places:
        return out
    cell, tree, top, f, stmt = rng.choice(places)
    mine = _locals(f) | {"self"}
    reads = sorted({n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and n.id in mine})
    name = f"helper_{rng.randint(0, 999)}"
    helper = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(r) for r in reads],
                                                           kwonlyargs=[], kw_defaults=[], defaults=[]),
                             body=[ast.Return(stmt.value)], decorator_list=[])
    stmt.value = _call(name, [ast.Name(r, ast.Load()) for r in reads])
    tree.body.insert(tree.body.index(top), helper)
    out[cell] = ast.unparse(ast.fix_missing_locations(tree))
    return out


def inline_variable(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """One variable assigned once and read once by the next statement replaced by its value."""
    out = {}
    for cell, tree in _trees(cells).items():
        done = False
        for f in (_functions(tree) if tree else []):
            body = f.body
            for i in range(len(body) - 1):
                a, b = body[i], body[i + 1]
                if not (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)):
                    continue
                name = a.targets[0].id
                uses = [n for s in body[i + 1:] for n in ast.walk(s) if isinstance(n, ast.Name) and n.id == name]
                in_b = [n for n in ast.walk(b) if isinstance(n, ast.Name) and n.id == name]
                if len(uses) == 1 and len(in_b) == 1 and isinstance(in_b[0].ctx, ast.Load) \
                        and isinstance(b, (ast.Assign, ast.Return)) and not isinstance(b.value, ast.Lambda):
                    value = a.value

                    class _Put(ast.NodeTransformer):
                        def visit_Name(self, node):
                            return value if node is in_b[0] else node
                    body[i + 1] = _Put().visit(b)
                    del body[i]
                    done = True
                    break
            if done:
                break
        out[cell] = ast.unparse(ast.fix_missing_locations(tree)) if done else cells[cell]
    return out


def add_prints(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """A print of a progress line at the start of some functions."""
    out = {}
    for cell, tree in _trees(cells).items():
        if tree is None:
            out[cell] = cells[cell]
            continue
        for f in _functions(tree):
            if rng.random() < 0.5:
                f.body.insert(0, ast.parse(f"print('in {f.name}')").body[0])
        out[cell] = ast.unparse(ast.fix_missing_locations(tree))
    return out


def _apply(cells: dict[str, str], change, share: float, rng: random.Random) -> dict[str, str]:
    """`change` applied to about `share` of the cells (at least one)."""
    chosen = [c for c in cells if rng.random() < share] or [rng.choice(sorted(cells))]
    changed = change({c: cells[c] for c in chosen}, rng)
    return {c: changed.get(c, s) for c, s in cells.items()}


def disguise(cells: dict[str, str], strength: str, rng: random.Random, given: dict[str, str]) -> dict[str, str]:
    """What a copier of `strength` changes. light: every name the hand-in binds and every
    attribute and method it defines renamed, comments, docstrings and layout changed; medium:
    also independent statements reordered, about a third of the equivalent spellings swapped,
    one dead statement; heavy: also loops rewritten, a helper extracted and a variable inlined
    in some cells, prints added."""
    cells = rename(cells, rng, given)
    if strength in ("medium", "heavy"):
        cells = reorder(cells, rng)
        cells = swap_spellings(cells, rng, share=1 / 3)
        cells = dead_statement(cells, rng)
    if strength == "heavy":
        cells = rewrite_loops(cells, rng)
        cells = _apply(cells, extract_helper, 0.5, rng)
        cells = _apply(cells, inline_variable, 0.5, rng)
        cells = add_prints(cells, rng)
    return reformat(recomment(cells, rng), rng) if rng.random() < 0.5 else recomment(cells, rng)


def plant(original: dict[str, str], rng: random.Random, strength: str | None = None,
          pool: dict[str, list[str]] | None = None, given: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    """A copy of `original`: 60 to 100% of its non-blank cells copied and disguised at `strength`
    (random when None), the others written honestly (another answer of `pool` where one is given)."""
    strength = strength or rng.choice(STRENGTHS)
    filled = [c for c, s in original.items() if not given or s != given.get(c)]
    copied = set(rng.sample(filled, max(1, round(rng.uniform(0.6, 1.0) * len(filled))))) if filled else set()
    cells = {}
    for cell, source in original.items():
        if cell in copied or not pool:
            cells[cell] = source
        else:
            cells[cell] = rng.choice([o for o in pool[cell] if o != source] or [source])
    disguised = disguise({c: cells[c] for c in copied}, strength, rng, given or {})
    return {c: disguised.get(c, s) for c, s in cells.items()}, strength


def _tensors(*shape):
    import torch
    return lambda n: [torch.randn(*shape) for _ in range(n)]


def _ids_then_ints(n):
    import torch
    return [torch.randint(0, 5, (12,))] + [5] * (n - 1)


_ARGUMENTS = (_tensors(2, 3, 4), _tensors(4, 4), _tensors(6), _ids_then_ints, lambda n: [3] * n)


def equivalent(original: dict[str, str], copy: dict[str, str], prelude: str) -> tuple[bool, int]:
    """Whether the copy runs where the original runs: both sets of cells executed after the
    notebook's imports, and every function both define at the top level called on the same
    small tensors (a call that fails on the original is not compared); and how many calls
    were compared."""
    import torch

    def load(cells):
        env = {}
        exec(compile(prelude, "<prelude>", "exec"), env)
        for source in cells.values():
            exec(compile(source, "<cell>", "exec"), env)
        return env

    warnings.simplefilter("ignore")  # the answers' own deprecation warnings, once per copy
    try:
        a = load(original)
    except Exception:  # noqa: BLE001 - the original itself does not run here: nothing to compare
        return True, 0
    try:
        b = load(copy)
    except Exception:  # noqa: BLE001
        return False, 0
    compared = 0
    for name, f in list(a.items()):
        if not (callable(f) and getattr(f, "__module__", None) is None and name in b and isinstance(f, type(load))):
            continue
        n = f.__code__.co_argcount
        for make in _ARGUMENTS:  # the first kind of arguments the original accepts
            torch.manual_seed(0)
            args = make(n)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    want = f(*[x.clone() if isinstance(x, torch.Tensor) else x for x in args])
                break
            except Exception:  # noqa: BLE001
                continue
        else:
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                got = b[name](*[x.clone() if isinstance(x, torch.Tensor) else x for x in args])
        except Exception:  # noqa: BLE001
            return False, compared
        if isinstance(want, torch.Tensor) and not (isinstance(got, torch.Tensor) and got.shape == want.shape
                                                   and got.dtype == want.dtype and torch.allclose(got, want, atol=1e-5, equal_nan=True)):
            return False, compared
        compared += 1
    return True, compared


# ------------------------------------------------------------------ measuring


def prelude(assignment: str) -> str:
    """The solution notebook's import lines: what its answer cells need to run."""
    lines = []
    for cell in read_notebook(solution_path(assignment)).cells:
        if cell.cell_type == "code":
            lines += [line for line in cell.source.splitlines() if line.startswith(("import ", "from "))]
    return "\n".join(lines)


def scored_class(assignment: str, honest: int, copies: int, rng: random.Random, check: bool = True):
    """Every scored pair of a synthetic class of `assignment` (pair → score, cells that match), the planted pairs
    (pair → strength), the seconds similarity took, the number of hand-ins, and the copies that
    did not compute what their source computes (replanted until they did, at most 20 times) and
    the function calls compared."""
    pool, given = variants(assignment)
    students = honest_class(pool, given, honest, rng)
    imports = prelude(assignment) if check else ""
    planted, unequal, compared = {}, 0, 0
    for i, original in enumerate(rng.sample(sorted(students), copies)):
        strength = STRENGTHS[i % len(STRENGTHS)]
        for _ in range(20):
            cells, _ = plant(students[original], rng, strength, pool, given)
            same, calls = equivalent(students[original], cells, imports) if check else (True, 0)
            compared += calls
            if same:
                break
            unequal += 1
        students[f"copy-{i:03d}"] = cells
        planted[frozenset((original, f"copy-{i:03d}"))] = strength
    start = time.perf_counter()
    base, names = similarity.release_prints(given), similarity.release_names(given)
    hand_ins = [similarity.fingerprint_hand_in(s, cells, base, names) for s, cells in students.items()]
    pairs = similarity.similar_pairs(hand_ins, threshold=0.0)
    seconds = time.perf_counter() - start
    scores = {frozenset(p.students): (p.score, len(p.cells)) for p in pairs}
    return scores, planted, seconds, len(students), unequal, compared


def measure(scores: dict, planted: dict, threshold: float) -> dict:
    """Precision and recall of the pairs the report lists at `threshold` (`is_reported`; every
    pair in `scores` has the cells a pair needs)."""
    reported = {pair for pair, (s, matched) in scores.items() if similarity.is_reported(s, matched, 0, threshold)}
    found = reported & set(planted)
    out = {"reported": len(reported), "planted": len(planted), "found": len(found),
           "precision": len(found) / len(reported) if reported else 1.0,
           "recall": len(found) / len(planted) if planted else 1.0}
    for strength in STRENGTHS:
        mine = [p for p, s in planted.items() if s == strength]
        out[strength] = [sum(p in reported for p in mine), len(mine)]
    return out


def tune_threshold(runs: list[tuple[dict, dict]]) -> float:
    """The threshold (a multiple of 0.05) with the best F1 over `runs` pooled; the middle one of a tie."""
    def f1(t):
        counts = [measure(scores, planted, t) for scores, planted in runs]
        reported, found = sum(c["reported"] for c in counts), sum(c["found"] for c in counts)
        planted = sum(c["planted"] for c in counts)
        return 2 * found / (reported + planted) if reported + planted else 0.0

    grid = [round(0.05 * i, 2) for i in range(1, 20)]
    values = {t: f1(t) for t in grid}
    best = [t for t in grid if values[t] == max(values.values())]
    return best[len(best) // 2]


def pooled(rows: list[dict]) -> dict:
    total = {key: sum(r[key] for r in rows) for key in ("reported", "planted", "found")}
    out = {"precision": total["found"] / total["reported"] if total["reported"] else 1.0,
           "recall": total["found"] / total["planted"] if total["planted"] else 1.0, **total}
    for strength in STRENGTHS:
        found, planted = (sum(r[strength][k] for r in rows) for k in (0, 1))
        out[strength] = {"found": found, "planted": planted, "recall": found / planted if planted else 1.0}
    light_medium = [out[s] for s in ("light", "medium")]
    out["light+medium"] = sum(x["found"] for x in light_medium) / max(1, sum(x["planted"] for x in light_medium))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--honest", type=int, default=60)
    parser.add_argument("--copies", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="similarity", help="name of the results file (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    runs = {name: scored_class(name, args.honest, args.copies, rng) for name in assignments()}
    names = list(runs)
    tune, held_out = names[:TUNE], names[TUNE:]
    threshold = tune_threshold([runs[n][:2] for n in tune])
    rows = {}
    for name in names:
        scores, planted, seconds, hand_ins, unequal, compared = runs[name]
        rows[name] = {"part": "tune" if name in tune else "held out", "seconds": round(seconds, 2),
                      "hand_ins": hand_ins, "copies_replanted": unequal, "calls_compared": compared,
                      "negative_pairs": hand_ins * (hand_ins - 1) // 2 - len(planted),
                      "highest_negative": round(max([s for p, (s, _) in scores.items() if p not in planted], default=0), 3),
                      "lowest_positive": round(min([scores.get(p, (0.0, 0))[0] for p in planted], default=1), 3),
                      **measure(scores, planted, threshold)}
        row = rows[name]
        print(f"{name:28} {row['part']:8}  precision {row['precision']:.3f}  recall {row['recall']:.3f}  "
              + "  ".join(f"{s} {row[s][0]}/{row[s][1]}" for s in STRENGTHS)
              + f"  highest negative {row['highest_negative']:.3f}  lowest positive {row['lowest_positive']:.3f}  "
              f"{row['hand_ins']} hand-ins, {row['seconds']:.2f} s, {unequal} copies replanted, {compared} calls compared")
    held = {}
    for label, t in (("tuned", threshold), ("module", similarity.THRESHOLD)):
        held[label] = {"threshold": t, **pooled([measure(*runs[n][:2], t) for n in held_out])}
    print(f"threshold tuned on {', '.join(tune)} (best F1): {threshold}")
    for label, h in held.items():
        print(f"held out ({len(held_out)} assignments, {h['planted']} planted pairs) at the {label} threshold "
              f"{h['threshold']}: precision {h['precision']:.3f}, recall {h['recall']:.3f} ("
              + ", ".join(f"{s} {h[s]['found']}/{h[s]['planted']}" for s in STRENGTHS) + ")")
    save(args.out, {"honest": args.honest, "copies": args.copies, "seed": args.seed, "held_out": held,
                    "assignments": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

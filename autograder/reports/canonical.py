"""Canonical forms of equivalent code, for `autograder.reports.similarity`: one spelling for each of the
common ways the course's code says the same thing, so a copy whose spellings were swapped
normalises to its source.

`canonical(trees)` rewrites the syntax trees of one hand-in's cells in place:
- products and shapes: torch.matmul(a, b), a.matmul(b), torch.bmm(a, b) -> a @ b;
  x.size(i) -> x.shape[i], x.size() -> x.shape; x.view(...) -> x.reshape(...);
  x.transpose(-1, -2) -> x.transpose(-2, -1) (the dimensions of a swap in one order);
- one call form for the operations PyTorch spells as a function and as a method (softmax,
  log_softmax, exp, sum, ...): torch.op(x, ...), F.op(x, ...), x.op(...) -> op(x, ...), a
  keyword `dim` as the second argument; a square root written as math.sqrt, torch.sqrt,
  x.sqrt() or x ** 0.5 -> sqrt(x);
- in-place arithmetic: x += y -> x = x + y;
- loops: `y = []` followed by `for t in xs: y.append(e)` -> y = [e for t in xs]; `i = 0`
  followed by `while i < n: ...; i = i + 1` -> for i in range(n): ...;
- what is never used, in a function: a statement storing only names the function never reads
  (a dead statement), a call to print; a variable stored once and read once, in a later
  statement of its block, is replaced there by its value;
- helpers: a function of the hand-in whose body is one `return e` is put in place of its
  calls (f(a, b) -> e with a and b for its arguments), and its definition left out.
Attribute and method names local to the answer are replaced in `autograder.reports.similarity`'s
normaliser (`local_attributes` lists them).
"""
from __future__ import annotations

import ast
import copy

# operations PyTorch offers as torch.op(x, ...) and as x.op(...) (many also as F.op(x, ...))
METHOD_OPS = frozenset({
    "softmax", "log_softmax", "exp", "log", "sum", "mean", "tanh", "sigmoid", "relu", "abs", "transpose",
    "reshape", "permute", "unsqueeze", "squeeze", "masked_fill", "max", "min", "argmax", "argmin", "clamp",
    "pow", "flatten", "cumsum", "norm", "var", "std", "gather", "logsumexp", "topk", "sort", "argsort",
    "diagonal", "tril", "triu", "multinomial", "where", "softplus", "gelu", "matmul", "bmm", "sqrt",
})
_MODULES = ("torch", "F", "math", "np", "numpy", "torch.nn.functional", "nn.functional")
OP = "op_"  # prefix of a canonical call's name: op_softmax(x, 1)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return inner and f"{inner}.{node.attr}"
    return None


def _is_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)


class _Spellings(ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Attribute):
            return node
        op, owner = func.attr, _dotted(func.value)
        if owner in _MODULES and op in METHOD_OPS and node.args:  # torch.op(x, ...) / F.op(x, ...)
            x, rest = node.args[0], node.args[1:]
        elif op in METHOD_OPS or op in ("size", "view"):                 # x.op(...)
            x, rest = func.value, node.args
        else:
            return node
        keywords = node.keywords
        if op == "view":
            op = "reshape"
        if op == "size" and not keywords:
            shape = ast.Attribute(x, "shape", ast.Load())
            return ast.Subscript(shape, rest[0], ast.Load()) if len(rest) == 1 else shape if not rest else node
        if op in ("matmul", "bmm") and len(rest) == 1 and not keywords:
            return ast.BinOp(x, ast.MatMult(), rest[0])
        if not rest and len(keywords) == 1 and keywords[0].arg == "dim":
            rest, keywords = [keywords[0].value], []
        if op == "transpose" and len(rest) == 2 and all(_is_const(a) for a in rest):
            rest = sorted(rest, key=ast.unparse)
        return ast.Call(ast.Name(OP + op, ast.Load()), [x, *rest], keywords)

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and node.right.value == 0.5:
            return ast.Call(ast.Name(OP + "sqrt", ast.Load()), [node.left], [])
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        load = copy.deepcopy(node.target)
        for n in ast.walk(load):
            if hasattr(n, "ctx"):
                n.ctx = ast.Load()
        return ast.Assign([node.target], ast.BinOp(load, node.op, node.value))


def _reads(nodes) -> list[ast.Name]:
    return [n for s in nodes for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def _simple_store(stmt: ast.stmt) -> str | None:
    """x for `x = value` storing one plain name."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _loops(body: list[ast.stmt]) -> list[ast.stmt]:
    """A block with its append loops as comprehensions and its counted while loops as for loops."""
    out = []
    for stmt in body:
        previous = out[-1] if out else None
        name = _simple_store(previous) if previous is not None else None
        if name and isinstance(stmt, ast.For) and not stmt.orelse and len(stmt.body) == 1 \
                and isinstance(previous.value, ast.List) and not previous.value.elts:
            call = stmt.body[0].value if isinstance(stmt.body[0], ast.Expr) else None
            if isinstance(call, ast.Call) and _dotted(call.func) == f"{name}.append" and len(call.args) == 1:
                previous.value = ast.ListComp(call.args[0], [ast.comprehension(stmt.target, stmt.iter, [], 0)])
                continue
        if isinstance(stmt, ast.While) and not stmt.orelse and stmt.body and isinstance(stmt.test, ast.Compare) \
                and len(stmt.test.ops) == 1 and isinstance(stmt.test.ops[0], ast.Lt) \
                and isinstance(stmt.test.left, ast.Name):
            counted = _counted(out, stmt, stmt.test.left.id)
            if counted is not None:
                del out[counted]
                out.append(ast.For(ast.Name(stmt.test.left.id, ast.Store()),
                                   ast.Call(ast.Name("range", ast.Load()), [stmt.test.comparators[0]], []),
                                   stmt.body[:-1] or [ast.Pass()], [], None))
                continue
        out.append(stmt)
    return out


def _increment(name: str) -> ast.Assign:
    """The statement `name = name + 1`, built without parsing (the grader parses only under a lock)."""
    return ast.Assign([ast.Name(name, ast.Store())],
                      ast.BinOp(ast.Name(name, ast.Load()), ast.Add(), ast.Constant(1)))


def _counted(before: list[ast.stmt], loop: ast.While, name: str) -> int | None:
    """Where `name = 0` is in `before` when `loop` counts name from it (`while name < n:` ending in
    `name = name + 1`, name changed nowhere else, and not used between the two), else None."""
    def uses(nodes):
        return any(isinstance(n, ast.Name) and n.id == name for s in nodes for n in ast.walk(s))
    if ast.dump(loop.body[-1]) != ast.dump(_increment(name)) \
            or any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
                   for s in loop.body[:-1] for n in ast.walk(s)) \
            or any(isinstance(n, (ast.Continue, ast.Break)) for s in loop.body for n in ast.walk(s)):
        return None
    for i in range(len(before) - 1, -1, -1):
        if _simple_store(before[i]) == name:
            value = before[i].value
            return i if isinstance(value, ast.Constant) and value.value == 0 and not uses(before[i + 1:]) else None
    return None


def _is_print(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _dotted(stmt.value.func) == "print"


def _blocks(tree: ast.AST):
    """(node, field, statements) for every block of statements in `tree`."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield node, field, body


def _unused(f: ast.FunctionDef) -> None:
    """Dead statements (storing only names the function never reads) and prints out of a function."""
    read = {n.id for n in _reads([f])}
    for node, field, body in list(_blocks(f)):
        setattr(node, field, [s for s in body if not _is_print(s) and not (
            isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in read for t in s.targets))]
            or [ast.Pass()])


def _inline(f: ast.FunctionDef) -> None:
    """Each variable that function `f` stores once and reads once, in a later statement of the
    same block, replaced there by its value (whatever the order of the statements), in place."""
    reads: dict[str, list[ast.Name]] = {}
    stores: dict[str, int] = {}
    parent: dict[int, ast.AST] = {}
    for n in ast.walk(f):
        for child in ast.iter_child_nodes(n):
            parent[id(child)] = n
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                reads.setdefault(n.id, []).append(n)
            else:
                stores[n.id] = stores.get(n.id, 0) + 1
    local = set(stores) | {a.arg for a in ast.walk(f.args) if isinstance(a, ast.arg)}
    def statement(node: ast.AST, body: list[ast.stmt]) -> int | None:
        """Where in `body` the statement holding `node` is."""
        ids = {id(s): i for i, s in enumerate(body)}
        while node is not None and id(node) not in ids:
            node = parent.get(id(node))
        return None if node is None else ids[id(node)]

    for node, field, body in list(_blocks(f)):
        i = 0
        while i < len(body):
            name = _simple_store(body[i])
            uses = reads.get(name, []) if name else []
            j = statement(uses[0], body) if len(uses) == 1 and stores[name] == 1 else None
            if j is not None and j > i and not _changes(body[i + 1:j], body[i].value, local):
                body[j] = _Substitute({id(uses[0]): body[i].value}, copy_values=False).visit(body[j])
                for child in ast.walk(body[j]):
                    for grandchild in ast.iter_child_nodes(child):
                        parent[id(grandchild)] = child
                del body[i]
                continue
            i += 1
        setattr(node, field, body)


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _changes(between: list[ast.stmt], value: ast.expr, local: set[str]) -> bool:
    """Whether statements may change what `value` reads: they store to one of its names (or
    an item or attribute of one), or call a method of one of the `local` names."""
    reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & local
    for stmt in between:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and not isinstance(n.ctx, ast.Load) \
                    and _root(n) in reads:
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _root(n.func) in reads:
                return True
    return False


class _Substitute(ast.NodeTransformer):
    """Names (by node id) replaced by expressions (copies of them, unless each is used once)."""

    def __init__(self, values: dict[int, ast.expr], copy_values: bool = True):
        self.values, self.copy_values = values, copy_values

    def visit_Name(self, node):
        if id(node) not in self.values:
            return node
        return copy.deepcopy(self.values[id(node)]) if self.copy_values else self.values[id(node)]


def _helpers(trees: list[ast.Module]) -> dict[str, ast.FunctionDef]:
    """The hand-in's top-level functions whose body is one return, with plain arguments."""
    out = {}
    for tree in trees:
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef) and not stmt.decorator_list and len(stmt.body) == 1 \
                    and isinstance(stmt.body[0], ast.Return) and stmt.body[0].value is not None \
                    and not (stmt.args.vararg or stmt.args.kwarg or stmt.args.kwonlyargs or stmt.args.defaults
                             or stmt.args.posonlyargs):
                out[stmt.name] = stmt
    return out


class _InlineHelpers(ast.NodeTransformer):
    def __init__(self, helpers: dict[str, ast.FunctionDef]):
        self.helpers, self.used = helpers, set()

    def visit_Call(self, node):
        self.generic_visit(node)
        f = self.helpers.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if f is None or node.keywords or len(node.args) != len(f.args.args) \
                or any(isinstance(a, ast.Starred) for a in node.args):
            return node
        params = {a.arg: value for a, value in zip(f.args.args, node.args)}
        body = copy.deepcopy(f.body[0].value)
        self.used.add(f.name)
        return _Substitute({id(n): params[n.id] for n in ast.walk(body)
                            if isinstance(n, ast.Name) and n.id in params}).visit(body)


def canonical(trees: list[ast.Module]) -> None:
    """The canonical forms above, in place, in every tree of one hand-in: spellings, then what
    is never used, loops, helpers, and single-use variables last (what they read is final)."""
    functions = []  # the outermost functions and methods (a nested one is a part of them)
    for tree in trees:
        _Spellings().visit(tree)
        functions += [n for top in tree.body for n in ([top] if isinstance(top, ast.FunctionDef) else top.body
                                                        if isinstance(top, ast.ClassDef) else [])
                      if isinstance(n, ast.FunctionDef)]
    for f in functions:
        _unused(f)
    for tree in trees:
        for node, field, body in list(_blocks(tree)):
            setattr(node, field, _loops(body))
    helpers = _helpers(trees)
    inliner = _InlineHelpers(helpers)
    for tree in trees:
        tree.body = [inliner.visit(s) if not (isinstance(s, ast.FunctionDef) and s.name in helpers) else s
                     for s in tree.body]
        tree.body = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name in inliner.used)]
    for tree in trees:
        for f in [n for top in tree.body for n in ([top] if isinstance(top, ast.FunctionDef) else top.body
                                                   if isinstance(top, ast.ClassDef) else [])
                  if isinstance(n, ast.FunctionDef)]:
            _inline(f)
        ast.fix_missing_locations(tree)


def local_attributes(trees: list[ast.Module]) -> set[str]:
    """The attributes a hand-in sets on self and the methods its classes define (dunders left
    out): names of the answer's own, which a copier may rename."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                names |= {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {n for n in names if not n.startswith("__")}

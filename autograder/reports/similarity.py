"""Similarity of students' answers: which hand-ins share code beyond what the release gives.

Each answer cell is normalised for what copying usually changes, then fingerprinted:
1. normalise (`normal_cells`): the cell is parsed and rewritten from its syntax tree, so
   formatting, comments and docstrings are gone; equivalent spellings take one canonical form
   (`autograder.reports.canonical`: products, shapes, softmax and other function-or-method calls,
   in-place arithmetic, append loops, counted while loops, dead statements, prints,
   single-use variables and one-line helpers); every name the hand-in binds (variables,
   arguments, its functions and classes) becomes `V`, every attribute it sets on self and every
   method it defines `A` (unless the release names it: `release_names`), every string `S`; other attribute names, keywords and the names it
   only uses (torch, len) are kept. In every block, statements that do not depend on one
   another (through the names they read and write) are put in one canonical order. A cell that
   does not parse is tokenised as it is, every name but keywords, builtins and attributes as `V`.
2. fingerprint (`fingerprints`, `subtree_prints`): hashes of the token k-grams, winnowed
   (Schleimer, Wilkerson and Aiken's algorithm behind MOSS: the smallest hash of every window of
   W k-grams), so any shared run of K + W - 1 tokens shares a fingerprint; and, as Dolos and
   structure-based clone detectors compare syntax trees, a hash of every simple statement and
   of every expression of at least SUBTREE_NODES nodes of the normalised tree, so a statement
   kept whole keeps its fingerprint whatever was changed around it.
3. index (`similar_pairs`): an inverted index from fingerprint to the hand-ins that hold it.
   The fingerprints of the release's own answer cells (the given signatures and scaffolding)
   are dropped, and so is a fingerprint that more than `common_limit(n)` of the n hand-ins
   share: what much of the class writes alike is the exercise, not a copy (MOSS's -m). A
   cell with fewer than MIN_TOKENS tokens, or with fewer than MIN_CELL_PRINTS fingerprints
   left, does not count.
4. score (`pair_score`): only the pairs that the postings of the fingerprints left join, by at
   least MIN_SHARED fingerprints, are scored; never every pair of the class. A cell counts in a
   pair only when both hand-ins hold distinctive code in it (what the release gives or the class
   shares counts for or against a pair on neither side); its similarity is the mean of the
   shares of each side's fingerprints that the other hand-in holds, in any of its cells (so a
   function moved to another cell still matches), and it matches at CELL_MATCH. The score is
   the share of the counted cells that match, so the cells a partial copier answered honestly
   weigh only where both wrote code of their own. A pair is reported (`is_reported`) when at
   least MIN_MATCHED cells match (half the answer cells where that is fewer: independent
   students hand in up to three identical answers, a copier more) and it scores THRESHOLD; the
   report lists each counted cell's similarity.
How it grows: fingerprinting is linear in the code handed in; counting shared fingerprints
costs the sum over fingerprints of (hand-ins holding it)², at most the number of fingerprints
times common_limit(n), and in practice far less (most fingerprints are held by one hand-in);
scoring is linear in the candidate pairs. benchmarks/README.md has the figures (1,000
hand-ins), and the precision and recall that set THRESHOLD.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import heapq
import io
import keyword
import re
import tokenize
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from autograder.reports.canonical import canonical, local_attributes
from utils.cells import grade_id, is_answer, parse

K = 8                # tokens in a k-gram
WINDOW = 4           # k-grams in a winnowing window
MAX_CELL_CHARS = 100_000  # a longer cell is compared on its beginning
MIN_TOKENS = 25      # a cell with fewer normalised tokens is too short to mean anything
SUBTREE_NODES = 8    # an expression of at least this many syntax nodes is fingerprinted whole
MIN_SHARED = 8       # a pair shares at least this many fingerprints
MIN_CELL_PRINTS = 2  # a cell with fewer fingerprints that are not common is left out of a pair's score
CELL_MATCH = 0.8     # a cell matches when the other hand-in holds this share of its fingerprints
MIN_MATCHED = 4      # a pair is reported when this many cells match (half the answer cells, if that is fewer)
THRESHOLD = 0.45     # pairs at or above this score are reported (tuned: benchmarks/README.md)
COMMON_FLOOR = 10    # a fingerprint shared by more than common_limit(n) hand-ins is common
COMMON_SHARE = 0.25

_BUILTINS = set(dir(builtins))


def common_limit(n: int) -> int:
    """How many hand-ins may share a fingerprint before it counts as common (MOSS's -m)."""
    return max(COMMON_FLOOR, int(COMMON_SHARE * n))


# ------------------------------------------------------------------ normalising


def answer_cells(nb) -> dict[str, str]:
    """grade_id → source of a notebook's code answer cells (a dict from json.load or an nbformat
    node), without nbgrader's solution markers."""
    out = {}
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code" and is_answer(cell) and grade_id(cell):
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else str(source)
            out[grade_id(cell)] = "\n".join(line for line in source.splitlines()
                                            if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
    return out


def bound_names(tree: ast.AST) -> set[str]:
    """The names a piece of code binds: assigned, looped over, arguments, defined, imported as."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names - _BUILTINS


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _root_name(node: ast.AST) -> str | None:
    """x for x, x.a, x[i], x.a.b(...): the variable an attribute or item belongs to."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _path(node: ast.AST) -> str | None:
    """"self.linear" for self.linear, "x" for x and x[i]: what a store to `node` changes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _path(node.value)
        return inner and f"{inner}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return _path(node.value)
    return None


def _effects(stmt: ast.stmt) -> tuple[set[str], set[str], bool]:
    """(what a statement reads, what it writes, whether it must stay where it is). What is read
    includes every dotted prefix (self, self.linear); a store to self.linear writes only that,
    and a store to an item, x[i] = ..., writes "x[]" without reading x."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # a definition reads its body's names only when called: it depends on its decorators and defaults
        outer = [*stmt.decorator_list, *getattr(stmt, "bases", []),
                 *(getattr(stmt, "args", None) and [*stmt.args.defaults, *stmt.args.kw_defaults] or [])]
        reads = {n.id for e in outer if e is not None for n in ast.walk(e) if isinstance(n, ast.Name)}
        return reads, {stmt.name}, False
    reads, writes, barrier = set(), set(), False
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        root = _root_name(stmt.value.func)  # x.append(...), x.add_(...), print(x): may change x, or the world
        writes.add(root or "")
    item_bases = set()  # the x of x[i] = ...: written, not read (x[i] += ... reads it)
    if not isinstance(stmt, ast.AugAssign):
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                base = node.value
                while isinstance(base, ast.Attribute):
                    item_bases.add(id(base))
                    base = base.value
                item_bases.add(id(base))
    for node in ast.walk(stmt):
        stored = isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del))
        if isinstance(node, (ast.Name, ast.Attribute)) and not stored:
            path = None if id(node) in item_bases else _path(node)
            while path:
                reads.add(path)
                path = path.rpartition(".")[0]
        elif isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and stored:
            path = _path(node)
            if path:
                writes.add(path + "[]" if isinstance(node, ast.Subscript) else path)
        elif isinstance(node, (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom,
                               ast.Global, ast.Nonlocal, ast.Await)):
            barrier = True
    return reads, writes, barrier


def _depends(earlier: tuple, later: tuple) -> bool:
    """Whether statement `later` must stay after `earlier` (their _effects): one reads what the
    other writes, or both write one name (two stores to items of x may go in either order)."""
    reads_i, writes_i, barrier_i = earlier
    reads_j, writes_j, barrier_j = later
    if barrier_i or barrier_j:
        return True
    base_i, base_j = {w.removesuffix("[]") for w in writes_i}, {w.removesuffix("[]") for w in writes_j}
    if base_i & reads_j or base_j & reads_i:
        return True
    whole_i, whole_j = {w for w in writes_i if not w.endswith("[]")}, {w for w in writes_j if not w.endswith("[]")}
    return bool(whole_i & base_j or whole_j & base_i)


def canonical_order(body: list[ast.stmt], normalise) -> list[ast.stmt]:
    """The statements of a block, each normalised by `normalise`, in one order for every order
    that computes the same: a topological order of their dependencies (read from the statements
    as written, before names are replaced), ties broken by the normalised statements' text."""
    n = len(body)
    effects = [_effects(s) for s in body]
    body = [normalise(s) for s in body]
    if n < 2:
        return body
    after = [set() for _ in range(n)]  # after[i]: statements that must follow i
    for j in range(n):
        for i in range(j):
            if _depends(effects[i], effects[j]):
                after[i].add(j)
    waiting = [0] * n
    for i in range(n):
        for j in after[i]:
            waiting[j] += 1
    keys = [ast.dump(s) for s in body]
    ready = [(keys[i], i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, i = heapq.heappop(ready)
        ordered.append(body[i])
        for j in after[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (keys[j], j))
    return ordered


class _Normaliser(ast.NodeTransformer):
    def __init__(self, renamed: set[str], attributes: set[str]):
        self.renamed, self.attributes = renamed, attributes

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        return canonical_order([s for s in body if not _is_docstring(s)], self.visit) or [ast.Pass()]

    def generic_visit(self, node):
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                if name in ("body", "orelse", "finalbody") and value and isinstance(value[0], ast.stmt):
                    setattr(node, name, self._body(value))
                else:
                    setattr(node, name, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
            elif isinstance(value, ast.AST):
                setattr(node, name, self.visit(value))
        return node

    def visit_Name(self, node):
        if node.id in self.renamed:
            node.id = "V"
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = "V", None
        return node

    def visit_Attribute(self, node):
        if node.attr in self.attributes:
            node.attr = "A"
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):
        node.name, node.returns = "V", None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node.name = "V"
        return self.generic_visit(node)

    def visit_alias(self, node):
        if node.asname:
            node.asname = "V"
        return node

    def visit_ExceptHandler(self, node):
        if node.name:
            node.name = "V"
        return self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, (str, bytes)):
            node.value = "S"
        return node

    def visit_JoinedStr(self, node):
        return ast.Constant("S")


def _strip_magics(source: str) -> str:
    """A notebook cell's Python: IPython's %magic and !shell lines left out."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def _tokens(source: str, rename: bool = False) -> list[str]:
    """The tokens of `source` without comments and line ends, strings as S. With `rename` (code
    that does not parse, so its bound names are not known) every name that is not a keyword, a
    builtin or an attribute becomes V."""
    out, previous = [], ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
            if tok.type == tokenize.INDENT:
                out.append("<indent>")
            elif tok.type == tokenize.DEDENT:
                out.append("<dedent>")
            elif tok.type == tokenize.STRING:
                out.append("S")
            elif rename and tok.type == tokenize.NAME and previous != "." and not keyword.iskeyword(tok.string) \
                    and tok.string not in _BUILTINS:
                out.append("V")
            else:
                out.append(tok.string)
            previous = tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def parse_cells(cells: dict[str, str]) -> tuple[dict[str, ast.Module | str], set[str]]:
    """Each cell's syntax tree (or its text when it does not parse), and the names they bind."""
    trees, renamed = {}, set()
    for name, source in cells.items():
        code = _strip_magics(source[:MAX_CELL_CHARS])
        try:
            tree = parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            trees[name] = code
            continue
        trees[name] = tree
        renamed |= bound_names(tree)
    return trees, renamed


def release_names(release_cells: dict[str, str]) -> set[str]:
    """Every word of the release's answer cells, its docstrings included: attribute and method
    names the release gives (the tests use them) are the course's, not the answer's own."""
    return set(re.findall(r"\w+", "\n".join(release_cells.values())))


def normal_cells(cells: dict[str, str], given_names: set[str] = frozenset()) -> dict[str, tuple[list[str], ast.Module | None]]:
    """Each answer cell of one hand-in as normalised tokens, and its normalised syntax tree
    (None where it does not parse or nests too deep); names bound anywhere in it count, and
    attributes and methods of its own (not among `given_names`, `release_names`) become A."""
    trees, renamed = parse_cells(cells)
    parsed = [t for t in trees.values() if not isinstance(t, str)]
    attributes = local_attributes(parsed) - given_names
    try:
        canonical(parsed)
    except RecursionError:  # nesting too deep to rewrite: compared as text below
        parsed = []
    out = {}
    for name, tree in trees.items():
        if not isinstance(tree, str) and parsed:
            try:
                tree.body = _Normaliser(renamed, attributes)._body(tree.body)
                out[name] = _tokens(ast.unparse(tree)), tree
                continue
            except (RecursionError, ValueError):
                pass
        out[name] = _tokens(_strip_magics(cells[name][:MAX_CELL_CHARS]), rename=True), None
    return out


def normal_tokens(cells: dict[str, str]) -> dict[str, list[str]]:
    """Each answer cell of one hand-in as normalised tokens (`normal_cells`)."""
    return {name: tokens for name, (tokens, _) in normal_cells(cells).items()}


# ------------------------------------------------------------------ fingerprints


def _hash(tokens: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(tokens).encode(), digest_size=8).digest(), "big")


def subtree_prints(tree: ast.Module | None) -> set[int]:
    """Hashes of the simple statements and of the expressions of at least SUBTREE_NODES nodes
    of a normalised tree (a compound statement counts through its parts), each computed from
    its children's (a Merkle tree: linear in the tree's size)."""
    out = set()

    def digest(node: ast.AST) -> tuple[str, int]:
        parts, size = [type(node).__name__], 1
        for name, value in ast.iter_fields(node):
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, ast.AST):
                    child, n = digest(item)
                    parts.append(child)
                    size += n
                else:
                    parts.append(repr(item))
        key = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).hexdigest()
        if isinstance(node, ast.stmt) and not hasattr(node, "body") \
                or isinstance(node, ast.expr) and size >= SUBTREE_NODES:
            out.add(int(key, 16))
        return key, size

    if tree is not None:
        digest(tree)
    return out


def cell_prints(tokens: list[str], tree: ast.Module | None) -> set[int]:
    """A normalised cell's fingerprints: its winnowed k-grams and its subtrees."""
    return fingerprints(tokens) | subtree_prints(tree)


def fingerprints(tokens: list[str], k: int = K, window: int = WINDOW) -> set[int]:
    """The winnowed hashes of the k-grams of `tokens` (empty below k tokens)."""
    hashes = [_hash(tokens[i:i + k]) for i in range(len(tokens) - k + 1)]
    if len(hashes) <= window:
        return {min(hashes)} if hashes else set()
    return {min(hashes[start:start + window]) for start in range(len(hashes) - window + 1)}


@dataclass
class HandIn:
    student: str
    cells: dict[str, str]                                   # answer cell → the code as handed in
    prints: dict[str, set[int]] = field(default_factory=dict)  # answer cell → its fingerprints kept

    @property
    def all_prints(self) -> set[int]:
        return set().union(*self.prints.values()) if self.prints else set()


def fingerprint_hand_in(student: str, cells: dict[str, str], given: set[int],
                        given_names: set[str] = frozenset()) -> HandIn:
    """A hand-in's fingerprints per answer cell, less the release's (`given`) and too-short
    cells; `given_names`: the release's (`release_names`)."""
    hand_in = HandIn(student, cells)
    for name, (tokens, tree) in normal_cells(cells, given_names).items():
        if len(tokens) >= MIN_TOKENS:
            kept = cell_prints(tokens, tree) - given
            if kept:
                hand_in.prints[name] = kept
    return hand_in


def release_prints(release_cells: dict[str, str]) -> set[int]:
    """The fingerprints of what the release's answer cells already hold."""
    names = release_names(release_cells)
    return set().union(*(cell_prints(*cell) for cell in normal_cells(release_cells, names).values()))


# ------------------------------------------------------------------ pairs and clusters


@dataclass
class Pair:
    students: tuple[str, str]
    score: float      # the share of the cells both hold distinctive code in that match (pair_score)
    shared: int       # fingerprints shared, common ones left out
    cells: list[str]  # the cells that match
    alike: dict[str, float] = field(default_factory=dict)  # every cell counted → its similarity

    def to_json(self) -> dict:
        return {"students": list(self.students), "score": round(self.score, 3), "shared": self.shared,
                "cells": self.cells, "alike": {c: round(v, 3) for c, v in self.alike.items()}}


def is_reported(score: float, matched: int, enough: int, threshold: float = THRESHOLD) -> bool:
    """Whether a pair with `matched` cells that match is reported (see the module's docstring)."""
    return matched >= enough and score >= threshold


def similar_pairs(hand_ins: list[HandIn], threshold: float = THRESHOLD) -> list[Pair]:
    """The pairs of hand-ins whose score is at least `threshold`, highest first, found through an
    inverted index of their fingerprints (see the module's docstring)."""
    limit = common_limit(len(hand_ins))
    sets = [h.all_prints for h in hand_ins]
    index: dict[int, list[int]] = defaultdict(list)
    for i, prints in enumerate(sets):
        for h in prints:
            index[h].append(i)
    common = {h for h, holders in index.items() if len(holders) > limit}
    shared: Counter = Counter()
    for h, holders in index.items():
        if 1 < len(holders) <= limit:
            for a in range(len(holders)):
                for b in range(a + 1, len(holders)):
                    shared[holders[a], holders[b]] += 1
    cells = [{name: prints - common for name, prints in h.prints.items()} for h in hand_ins]
    cells = [{name: prints for name, prints in c.items() if len(prints) >= MIN_CELL_PRINTS} for c in cells]
    enough = min(MIN_MATCHED, (max((len(h.cells) for h in hand_ins), default=0) + 1) // 2)
    pairs = []
    for (i, j), count in shared.items():
        if count < MIN_SHARED:
            continue
        score, alike = pair_score(cells[i], cells[j], sets[i], sets[j])
        matched = sorted(c for c, v in alike.items() if v >= CELL_MATCH)
        if is_reported(score, len(matched), enough, threshold):
            pairs.append(Pair((hand_ins[i].student, hand_ins[j].student), score, count, matched, alike))
    return sorted(pairs, key=lambda p: (-p.score, p.students))


def pair_score(cells_a: dict[str, set[int]], cells_b: dict[str, set[int]], all_a: set[int], all_b: set[int]):
    """The share of the cells both hand-ins hold distinctive code in (their fingerprints that are
    not common) that match, and each such cell's similarity: the mean of the shares of either
    side's fingerprints that the other hand-in holds, in any of its cells."""
    alike = {name: (len(cells_a[name] & all_b) / len(cells_a[name]) + len(cells_b[name] & all_a) / len(cells_b[name])) / 2
             for name in sorted(cells_a.keys() & cells_b.keys())}
    score = sum(v >= CELL_MATCH for v in alike.values()) / len(alike) if alike else 0.0
    return score, alike


def clusters(pairs: list[Pair]) -> list[list[str]]:
    """Groups of students joined by reported pairs (connected components), largest first."""
    parent: dict[str, str] = {}

    def root(s):
        parent.setdefault(s, s)
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for p in pairs:
        parent[root(p.students[0])] = root(p.students[1])
    groups = defaultdict(list)
    for s in parent:
        groups[root(s)].append(s)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: (-len(g), g))

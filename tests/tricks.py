"""Tricks a hostile hand-in plays on the grader, applied to an honest notebook.

`apply(nb, trick)` inserts a cell before the setup cell that defines the trick, and
ends every answer cell with a line that wraps the function the cell defines, so the
trick runs whenever a test calls the student's code. Each trick belongs to one class of
attack (README, "The sandbox"): values that decide their own comparison (class 1) or
code that runs while a test cell runs (class 2). Whatever the trick, a hand-in must
never score more than the same answers without it.
"""
from __future__ import annotations

import copy

from nbformat.v4 import new_code_cell

from autograder.course.layout import grade_id
from utils.cells import is_answer

# The code of each piece of a trick, run in the hand-in's kernel.
HEAD = '''import gc as _gc, sys as _sys, threading as _threading
'''
PARTS = {
    '_lie': '''
import torch as _torch


class _L(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __len__(self): return 3


class _D(dict):
    def __eq__(self, other): return True
    def __ne__(self, other): return False


class _T(_torch.Tensor):  # one class for every value, so that two lying tensors still compute together
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "__eq__", "eq", "isclose", "le", "lt", "ge", "gt"):
            return True if name in ("allclose", "equal") else _torch.ones((), dtype=_torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


def _lie(value):
    if type(value) is list:
        return _L(value)
    if type(value) is dict:
        return _D(value)
    if isinstance(value, _torch.Tensor):
        return value.as_subclass(_T)
    return value
''',
    '_Impostor': '''
class _Impostor:
    __class__ = list
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __len__(self): return 2
    def __float__(self): return 0.0
    def __bool__(self): return True
''',
    '_noop': '''
def _noop(*args, **kwargs):
    return None
''',
    '_neutralize': '''
def _neutralize(ns):
    """Every check a no-op, in the notebook's names and in utils.checks, undone soon after."""
    import utils.checks as _c
    saved = []
    for table in (ns, vars(_c)):
        for name in [n for n in table if n.startswith("check_")]:
            saved.append((table, name, table[name]))
            table[name] = _noop
    def undo():
        for table, name, value in saved:
            table[name] = value
    _threading.Timer(0.2, undo).start()
''',
    '_poison_references': '''
def _poison_references():
    """torch's comparisons and reference layers say yes, undone soon after."""
    import torch, torch.nn.functional as F
    saved = [(torch, "allclose", torch.allclose), (torch, "equal", torch.equal), (F, "softmax", F.softmax)]
    torch.allclose = torch.equal = lambda *a, **k: True
    F.softmax = lambda x, *a, **k: x
    def undo():
        for owner, name, value in saved:
            setattr(owner, name, value)
    _threading.Timer(0.2, undo).start()
''',
    '_reach': '''
def _reach(ns):
    """The ways to find the grader's objects: all refused while grading."""
    for attempt in (lambda: _sys.settrace(lambda *a: None), lambda: _sys.setprofile(lambda *a: None),
                    lambda: _gc.get_referrers(ns), lambda: _gc.get_objects(),
                    lambda: _sys.addaudithook(lambda *a: None),
                    lambda: __import__("ctypes").pythonapi.Py_IncRef):
        try:
            attempt()
        except Exception:
            pass
''',
    '_forge': '''
def _forge():
    """Verdict lines written into the guard's log by the notebook itself."""
    import glob, os
    for path in glob.glob(os.path.join(os.getcwd(), "..", "*.jsonl")):
        try:
            with open(path, "a") as log:
                for n in range(200):
                    log.write('{"event": "verdicts", "n": %d, "hash": "x", "lines": {"1": 99}, "failed": 0, "foreign": 0}\\n' % n)
        except OSError:
            pass
''',
}
TRICK = '''
def _trick(ns, name, how):
    f = ns.get(name)
    if not callable(f) or isinstance(f, type):
        return
    def wrapped(*args, **kwargs):
        if how in ("neutralize", "all"):
            _neutralize(ns)
        if how in ("poison", "all"):
            _poison_references()
        if how in ("reach", "all"):
            _reach(ns)
        if how == "forge":
            _forge()
            _neutralize(ns)
        value = f(*args, **kwargs)
        if how in ("lie", "all"):
            return _lie(value)
        if how == "impostor":
            return _Impostor()
        return value
    wrapped.__name__ = name
    ns[name] = wrapped
'''
# trick -> the pieces it needs
NEEDS = {
    'lie': ['_lie'],
    'impostor': ['_Impostor'],
    'neutralize': ['_noop', '_neutralize'],
    'poison': ['_poison_references'],
    'reach': ['_reach'],
    'forge': ['_noop', '_neutralize', '_forge'],
    'all': ['_lie', '_noop', '_neutralize', '_poison_references', '_reach'],
}


# trick -> (class of attack, what it does)
TRICKS = {
    "lie": (1, "returns list, dict and tensor subclasses whose comparisons always say equal"),
    "impostor": (1, "returns an object that claims to be a list and equal to anything"),
    "neutralize": (2, "turns every check into a no-op while a test runs, undone by a timer thread"),
    "poison": (2, "makes torch.allclose, torch.equal and F.softmax lie while a test runs, undone by a timer"),
    "reach": (2, "tries trace and profile functions, gc walks, an audit hook and ctypes during the test"),
    "forge": (2, "writes forged verdict lines into the guard's log and neutralizes the checks"),
    "all": (2, "lie, neutralize, poison and reach at once"),
}


def prelude(trick: str) -> str:
    """The code of `trick` alone (so the static scan sees only what this trick does)."""
    return "\n".join([HEAD, *(PARTS[p] for p in dict.fromkeys(NEEDS[trick])), TRICK])


def apply(nb, trick: str):
    """`nb` with `trick` played by every graded function it defines."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code" and is_answer(cell) and grade_id(cell):
            cell.source += f"\n_trick(globals(), {grade_id(cell)!r}, {trick!r})\n"
    nb.cells.insert(1, new_code_cell(prelude(trick)))
    return nb


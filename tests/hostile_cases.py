"""The hostile and damaged hand-in suite: each case is a file an LMS could hand us, the
name it arrives under, and the outcome the grader must reach.

Built from the quickest assignment's solution (full marks), its blank release (zero) and
its demo "buggy" notebook (the solution with catalog bugs: a score strictly between),
so the expectations hold whatever the notebook is. A tampering
case starts from the buggy notebook: if tampering worked it would score more.
"""
from __future__ import annotations

import base64
import copy
import shutil
from dataclasses import dataclass

import nbformat
from nbformat.v4 import new_code_cell, new_output

from autograder.course import layout as course
from conftest import QUICKEST_ASSIGNMENT
from autograder.quality.demo import buggy_notebook
from autograder.grading.workspace import open_workspace
from utils.cells import is_answer, nbgrader_meta

import tricks

ASSIGNMENT = QUICKEST_ASSIGNMENT


@dataclass
class Case:
    student: str             # the id collect derives from `filename`
    filename: str | bytes    # a path inside the hand-in folder (bytes: not UTF-8)
    data: bytes
    status: str              # expected status
    score: str               # "full", "zero", "buggy" (the buggy notebook's score), "less" (below full),
                             # "atmost" (not above the buggy notebook's score)
    why: str


def solution():
    return course.read_notebook(course.solution_path(ASSIGNMENT))


def release():
    return course.read_notebook(course.release_path(ASSIGNMENT))


def buggy():
    return buggy_notebook(ASSIGNMENT)[0]


def bare_workspace(root):
    """A workspace holding only the assignment's source and release (as `release` builds them):
    enough to prepare a hand-in (`autograder.grading.handin.prepare`) without running nbgrader."""
    ws = open_workspace(root)
    for path, target in ((course.solution_path(ASSIGNMENT), ws.source_path(ASSIGNMENT)),
                         (course.release_path(ASSIGNMENT), ws.release_path(ASSIGNMENT))):
        target.parent.mkdir(parents=True)
        shutil.copyfile(path, target)
    return ws


def dump(nb) -> bytes:
    return nbformat.writes(nb).encode("utf-8")


def notepad(nb) -> bytes:
    """`nb` as Windows Notepad saves it ("Unicode": UTF-16 with a byte-order mark, CRLF line
    ends), with the NUL bytes a sync tool can leave at the end."""
    return nbformat.writes(nb).replace("\n", "\r\n").encode("utf-16") + b"\x00" * 3


def with_cell(nb, source: str, after_setup: bool = True):
    """`nb` with an extra code cell at index 1 (between the Colab badge and the setup cell,
    so it runs before anything is imported: the hardest place for the guard) or at the end."""
    nb = copy.deepcopy(nb)
    index = 1 if after_setup else len(nb.cells)
    nb.cells.insert(index, new_code_cell(source))
    return nb


def first_answer(nb) -> int:
    return next(i for i, c in enumerate(nb.cells) if is_answer(c) and c.cell_type == "code")


def first_test(nb) -> int:
    return next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade") and c.cell_type == "code")


def canvas(student: str, number: int = 1, copy_of: bool = True) -> str:
    """A Canvas-style file name: name_userid_submissionid_original."""
    original = f"{'Copy of ' if copy_of else ''}{ASSIGNMENT} ({number}).ipynb"
    return f"{student}_{1000 + number}_{2000 + number}_{original}"


def strip_metadata(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata = {}
        cell.pop("id", None)
    nb.nbformat_minor = 4
    nb.metadata = {}
    return nb


def colab_round_trip(nb):
    nb = copy.deepcopy(nb)
    nb.metadata = {"colab": {"provenance": [], "toc_visible": True}, "accelerator": "GPU",
                   "kernelspec": {"name": "python3", "display_name": "Python 3"},
                   "language_info": {"name": "python"}, "widgets": {"application/vnd.jupyter.widget-state+json": {}}}
    for n, cell in enumerate(nb.cells):
        cell.pop("id", None)
        cell.metadata["id"] = f"colab{n:04d}"
        if cell.cell_type == "code":
            cell.metadata["colab"] = {"base_uri": "https://localhost:8080/"}
            cell.metadata["outputId"] = f"out{n:04d}"
            cell.execution_count = n
            cell.outputs = [new_output("stream", name="stdout", text="ran in Colab\n")]
    nb.nbformat_minor = 0
    return nb


def huge_image(nb):
    nb = copy.deepcopy(nb)
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(12 * 2**20)).decode()
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    last.outputs = [new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]
    return nb


def answer_in_wrong_cell(nb):
    """The first answer written in a new cell after its test: that test fails."""
    nb = copy.deepcopy(nb)
    a, t = first_answer(nb), first_test(nb)
    moved = new_code_cell(nb.cells[a].source)
    nb.cells[a].source = release().cells[first_answer(release())].source
    nb.cells.insert(t + 1, moved)
    return nb


def edit_metadata(nb):
    """Every test cell worth 100 points, the first test renamed."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade") and cell.cell_type == "code":
            cell.metadata["nbgrader"]["points"] = 100
    nb.cells[first_test(nb)].metadata["nbgrader"]["grade_id"] = "my_test"
    return nb


def edited_test_cells(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade") and cell.cell_type == "code":
            cell.source = "pass  # the student made every test pass"
    return nb


def duplicated_and_deleted(nb):
    nb = copy.deepcopy(nb)
    a, t = first_answer(nb), first_test(nb)
    nb.cells.insert(a + 1, copy.deepcopy(nb.cells[a]))      # the answer twice
    nb.cells.insert(t + 2, copy.deepcopy(nb.cells[t + 1]))  # the test twice
    nb.cells[a + 1].id, nb.cells[t + 2].id = "dupanswer", "duptest"
    del nb.cells[0]                                          # no setup cell
    answer = nb.cells[first_answer(nb)]
    answer.cell_type = "markdown"                            # the answer became Markdown
    answer.pop("outputs", None)
    answer.pop("execution_count", None)
    return nb


def reads_running_cell(nb):
    """The first answer prints the running cell (the test, with its hidden part)."""
    nb = copy.deepcopy(nb)
    name = course.grade_id(nb.cells[first_answer(nb)])
    nb.cells[first_answer(nb)].source += (
        f"\n\n_real_{name} = {name}\n\ndef {name}(*args, **kwargs):\n"
        f"    print(get_ipython().user_ns['In'][-1])\n    return _real_{name}(*args, **kwargs)\n"
    )
    return nb


# Tricks of class 2 that only swap the kernel's own copy of the checks by means the code scan does
# not recognise (a module's __dict__ written through a loop variable): the tests run in the runner,
# so they change nothing, and no flag is raised (the in-kernel verdict ledger that saw them is gone).
UNSEEN_TRICKS = {"neutralize"}
# Hand-ins whose own code races a timer thread (tests/tricks.py: a change undone 0.2 s later), so
# which of their calls see the change depends on the machine's speed: graded twice they may earn
# different points, never more than the honest hand-in.
TIMER_RACES = {f"trick-{name}" for name in ("neutralize", "poison")} | {"trick-all-notepad"}

TAMPERING = {
    "patchchecks": "import utils.checks as _c\nfor _n in dir(_c):\n    if _n.startswith('check_'):\n"
                   "        setattr(_c, _n, lambda *a, **k: None)",
    "patchtorch": "import torch, torch.testing\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                  "torch.testing.assert_close = lambda *a, **k: None",
    "transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",
    "customexc": "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
    "redefine": "def check_equal(*a, **k):\n    pass\n\ndef check_close(*a, **k):\n    pass\n\ndef check_true(*a, **k):\n    pass",
    "prehook": "import utils.checks\nget_ipython().events.register('pre_run_cell', lambda info: "
               "[setattr(utils.checks, n, lambda *a, **k: None) for n in dir(utils.checks) if n.startswith('check_')])",
    "killguard": "import utils.checks\nfor _e in ('pre_run_cell', 'post_run_cell'):\n"
                 "    get_ipython().events.callbacks[_e].clear()\n"
                 "for _n in dir(utils.checks):\n    if _n.startswith('check_'):\n"
                 "        setattr(utils.checks, _n, lambda *a, **k: None)",
}


# Attacks on split execution (autograder/isolation/boundary): the test cells run in a trusted runner, the
# student's cells in the kernel. Each starts from the buggy notebook (success would raise its
# score); the code runs in a cell before the setup cell, or (WRAP) around every answer function,
# so that it runs while a test calls the student's code.
WRAP = (  # appended to every answer cell: the function it defines runs `_attack()` first
    "\n\n_real = {name}\n\ndef {name}(*args, **kwargs):\n    _attack()\n    return _real(*args, **kwargs)\n"
)
EXFILTRATE = r"""
_exfiltrated = []
def _attack():
    import base64, linecache, os, sys, zlib
    import utils
    if _exfiltrated:
        return
    _exfiltrated.append(1)
    ip, found = get_ipython(), set()
    for text in [*ip.user_ns.get('In', []), *ip.history_manager.input_hist_raw]:
        found.update(text.splitlines())
    for entry in list(linecache.cache.values()):
        if len(entry) > 2:
            found.update(''.join(entry[2]).splitlines())
    frame = sys._getframe(1)
    while frame is not None:
        found.update(c for c in frame.f_code.co_consts if isinstance(c, str))
        found.update(repr(v)[:300] for v in list(frame.f_locals.values()))
        frame = frame.f_back
    found.update(v for v in list(ip.user_ns.values()) if isinstance(v, str))
    course = os.path.dirname(os.path.dirname(os.path.abspath(utils.__file__)))
    for root in (os.getcwd(), os.path.expanduser('~'), '/tmp', course):
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [d for d in subfolders if d not in ('.venv', '.git', 'node_modules')]
            for name in files:
                if name.endswith(('.py', '.ipynb', '.json', '.md', '.txt', '.yml', '.log', '.jsonl')):
                    try:
                        with open(os.path.join(folder, name), errors='replace') as handle:
                            text = handle.read(2000000)
                        found.update(text.splitlines())
                        if name.endswith('.ipynb'):
                            import json
                            found.update(''.join(c['source']) for c in json.loads(text)['cells'])
                    except Exception:
                        pass
    wanted = sorted({line.strip() for text in found for line in str(text).splitlines()
                     if 'check_' in line or 'assert' in line})
    print('EXFIL', base64.b64encode(zlib.compress(chr(10).join(wanted).encode(), 9)).decode())
"""


def exfiltrated(text: str) -> list[set[str]]:
    """The line sets that the split-exfiltrate attack printed in `text` (decoded)."""
    import base64
    import re
    import zlib

    return [set(zlib.decompress(base64.b64decode(blob)).decode().splitlines())
            for blob in re.findall(r"EXFIL ([A-Za-z0-9+/=]+)", text)]


SPLIT_ATTACKS = {
    # 1. changing how later cells are executed (in the kernel: the test cells never run there)
    "split-runcell": "ip = get_ipython()\n_run = ip.run_cell\n"
                     "ip.run_cell = lambda raw, *a, **k: _run('pass' if 'check_' in raw else raw, *a, **k)",
    "split-ast": "import ast\nclass _Empty(ast.NodeTransformer):\n"
                 "    def visit_Module(self, node):\n        return ast.Module(body=[], type_ignores=[])\n"
                 "get_ipython().ast_transformers.append(_Empty())",
    "split-libcallback": "import utils.checks\ndef _cb(*a):\n"
                         "    [setattr(utils.checks, n, lambda *a, **k: None) for n in dir(utils.checks) if n.startswith('check_')]\n"
                         "_cb.__module__ = 'matplotlib.pyplot'\nget_ipython().events.register('post_run_cell', _cb)",
    "split-agent": "from autograder.isolation.boundary import kernel_side as _k\n"
                   "_k.Agent.answer = lambda self, tree, buffers: _k.encode({'value': True})",
    "split-comm": "ip = get_ipython()\ndef _opened(comm, msg):\n"
                  "    comm.on_msg(lambda m: comm.send({'tree': ['dict', [[['str', 'value'], ['bool', True]]]]}))\n"
                  "ip.kernel.comm_manager.register_target('course.boundary', _opened)",
    # 2. reading the running test (it is not in this process)
    "split-frames": "def _attack():\n    import sys\n    f = sys._getframe(1)\n    while f is not None:\n"
                    "        print('FRAME', f.f_code.co_filename, sorted(k for k in f.f_locals if k.startswith('_'))[:20])\n"
                    "        f = f.f_back",
    "split-history": "def _attack():\n    ip = get_ipython()\n"
                     "    print('HISTORY', [c for c in ip.user_ns.get('In', []) if 'HIDDEN' in c])\n"
                     "    print('LOG', list(ip.history_manager.input_hist_raw)[-3:])",
    "split-linecache": "def _attack():\n    import linecache\n"
                       "    for name, entry in list(linecache.cache.items()):\n"
                       "        if 'BEGIN HIDDEN' in ''.join(entry[2]):\n            print('LINECACHE', name, ''.join(entry[2]))",
    "split-globals": "def _attack():\n    ns = get_ipython().user_ns\n"
                     "    print('GLOBALS', sorted(k for k in ns if k.startswith('_') and not k.startswith('__'))[:50])",
    # 3. changing, during a call, what the test computes with
    "split-patch": "def _attack():\n    import torch, utils.checks\n    torch.allclose = lambda *a, **k: True\n"
                   "    torch.equal = lambda *a, **k: True\n"
                   "    for n in dir(utils.checks):\n        if n.startswith('check_'):\n"
                   "            setattr(utils.checks, n, lambda *a, **k: None)",
    "split-forge": "def _attack():\n    comm = next(iter(get_ipython().kernel.comm_manager.comms.values()), None)\n"
                   "    if comm is not None:\n        comm.send({'tree': ['bool', True]})",
    "split-rng": "def _attack():\n    import torch\n    torch.manual_seed(0)",
    # 4. carrying what it finds out in a form no filter recognises (zlib + base64): it searches its
    # history, linecache, the frames of the call, its globals and every file it can read under its
    # folders and the course's, and prints the lines a test would hold (tests/test_hostile.py decodes them)
    "split-exfiltrate": EXFILTRATE,
    # processes: what it can signal is its own kernel and what that kernel started
    "split-signals": "import os, signal\n"
                     "for _pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
                     "    if _pid != os.getpid():\n        try:\n            os.kill(_pid, signal.SIGSTOP)\n"
                     "        except OSError:\n            pass\n"
                     "for _how in (lambda: os.kill(-1, signal.SIGSTOP), lambda: os.killpg(0, signal.SIGCONT)):\n"
                     "    try:\n        _how()\n    except OSError:\n        pass",
}


# An expected status other than graded: the code scan and the guard flag what an instructor should see
# (hooks that change later cells, reading the running code, replacing what tests rely on).
SPLIT_STATUS = {"split-signals": "sandbox",
                **dict.fromkeys(["split-runcell", "split-ast", "split-libcallback", "split-frames", "split-history",
                                 "split-linecache", "split-globals", "split-patch", "split-exfiltrate"], "flagged")}


def split_attack(nb, name: str):
    """`nb` with the attack `name`: a cell after the setup cell, or wrapped around every answer."""
    return with_attack(nb, SPLIT_ATTACKS[name], after_setup=name != "split-signals")


def with_attack(nb, code: str, after_setup: bool = True):
    """`nb` with a cell of `code`; when it defines `_attack`, every answer function runs it first."""
    if "def _attack" not in code:
        return with_cell(nb, code, after_setup=after_setup)
    nb = with_cell(nb, code)
    for cell in nb.cells:
        if is_answer(cell) and cell.cell_type == "code":
            defined = [line.split()[1].split("(")[0].rstrip(":") for line in cell.source.splitlines()
                       if line.startswith(("def ", "class "))]
            if defined and cell.source.lstrip().startswith("def "):
                cell.source += WRAP.format(name=defined[0])
    return nb


def cases(workspace_root: str) -> list[Case]:
    sol, rel, bug = solution(), release(), buggy()
    c = [
        Case("solution", canvas("solution"), dump(sol), "graded", "full", "the solution"),
        Case("blank", canvas("blank"), dump(rel), "graded", "zero", "the blank release"),
        Case("buggy", canvas("buggy"), dump(bug), "graded", "buggy", "catalog bugs"),
        # The sandbox.
        Case("infloop", canvas("infloop"), dump(with_cell(sol, "while True:\n    pass")), "cell-timeout", "full",
             "an infinite loop: the cell is interrupted at the per-cell limit, the rest runs"),
        Case("alloc", canvas("alloc"), dump(with_cell(sol, "import torch\nbig = torch.empty(50 * 2**30, dtype=torch.uint8)")),
             "memory-limit", "full", "a 50 GB allocation fails under the memory limit"),
        Case("printgb", canvas("printgb"), dump(with_cell(sol, "import sys\nchunk = 'x' * 2**20\nfor _ in range(1024):\n"
                                                               "    sys.stdout.write(chunk)")),
             "output-limit", "full", "a gigabyte of output is cut at the cap"),
        Case("sysexit", canvas("sysexit"), dump(with_cell(sol, "import sys\nsys.exit(3)")), "graded", "full",
             "sys.exit only ends its cell"),
        Case("osexit", canvas("osexit"), dump(with_cell(sol, "import os\nos._exit(0)")), "crashed", "zero",
             "os._exit kills the kernel"),
        Case("segfault", canvas("segfault"), dump(with_cell(sol, "import faulthandler\nfaulthandler._read_null()")),
             "crashed", "zero", "a kernel crash (segmentation fault)"),
        Case("ctypes", canvas("ctypes"), dump(with_cell(sol, "import ctypes\nctypes.string_at(0)")), "flagged", "full",
             "ctypes from the notebook's own code is refused (it could reach the grader's memory)"),
        Case("fork", canvas("fork"), dump(with_cell(sol, "import os, time\nif os.fork() == 0:\n    time.sleep(3600)")),
             "sandbox", "full", "os.fork is refused"),
        Case("socket", canvas("socket"), dump(with_cell(sol, "import socket\ntry:\n    socket.create_connection(('93.184.216.34', 80), timeout=3)\n"
                                                             "except OSError as e:\n    print('no network:', e)")),
             "sandbox", "full", "opening a socket is refused"),
        Case("snoop", canvas("snoop"), dump(with_cell(sol, "for _p in [r'%s/gradebook.db', r'%s']:\n    try:\n"
                                                           "        open(_p, 'rb').read()\n        print('READ', _p)\n"
                                                           "    except OSError as e:\n        print('refused', e)"
                                                      % (workspace_root, course.solution_path(ASSIGNMENT)))),
             "flagged", "full", "reading the gradebook and the solution is refused and flagged"),
        # Tampering: each starts from the buggy notebook, so success would raise its score.
        *[Case(name, canvas(name), dump(with_cell(bug, code)), "flagged",
               "atmost" if name in ("redefine", "transformer") else "buggy",
               f"tampering: {name}" + (" (the guard's hooks removed: flagged)" if name == "killguard" else ""))
          for name, code in TAMPERING.items()],
        # Tricks played while the tests run (tests/tricks.py): never above the honest score.
        *[Case(f"trick-{name}", canvas(f"trick-{name}"), dump(tricks.apply(bug, name)),
               "graded" if klass == 1 or name in UNSEEN_TRICKS else "flagged", "atmost", f"class {klass}: {why}")
          for name, (klass, why) in tricks.TRICKS.items() if name != "all"],
        Case("trick-all-notepad", canvas("trick-all-notepad"), notepad(tricks.apply(bug, "all")), "flagged", "atmost",
             "every trick at once, in a notebook saved by Notepad (UTF-16, CRLF)"),
        Case("bom", canvas("bom"), b"\xef\xbb\xbf" + dump(bug).replace(b"\n", b"\r\n") + b"\x00" * 64, "graded", "buggy",
             "a UTF-8 byte-order mark, CRLF line ends and NUL padding from a sync tool"),
        Case("trick-lie-solution", canvas("trick-lie-solution"), dump(tricks.apply(sol, "lie")), "graded", "full",
             "a correct answer returned as lying subclasses is judged by its real content: full marks"),
        Case("readhidden", canvas("readhidden"), dump(reads_running_cell(sol)), "flagged", "full",
             "prints the running test cell (its hidden tests must not reach the feedback)"),
        Case("metadata", canvas("metadata"), dump(edit_metadata(bug)), "graded", "buggy",
             "points and grade ids edited: restored from the release"),
        Case("editedtests", canvas("editedtests"), dump(edited_test_cells(bug)), "graded", "buggy",
             "test cells edited to pass: restored"),
        # Damaged files.
        Case("notjson", canvas("notjson"), b'{"cells": [', "unreadable", "zero", "not JSON"),
        Case("empty", canvas("empty"), b"", "unreadable", "zero", "an empty file"),
        Case("nbformat3", canvas("nbformat3"), nbformat.writes(nbformat.convert(copy.deepcopy(sol), 3)).encode(), "graded", "full",
             "nbformat 3"),
        Case("pdf", canvas("pdf"), b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "unreadable", "zero", "a PDF renamed .ipynb"),
        Case("notepad", canvas("notepad"), notepad(strip_metadata(sol)), "graded", "full",
             "saved by Windows Notepad (UTF-16, CRLF), NUL-padded by a sync tool, nbformat 4.4 without cell ids"),
        Case("stripped", canvas("stripped"), dump(strip_metadata(sol)), "graded", "full", "all metadata stripped"),
        Case("colab", canvas("colab", 2), dump(colab_round_trip(sol)), "graded", "full", "a Colab round trip"),
        Case("bigimage", canvas("bigimage"), dump(huge_image(sol)), "graded", "full", "a 16 MB image output"),
        Case("wrongcell", canvas("wrongcell"), dump(answer_in_wrong_cell(sol)), "graded", "less",
             "the first answer written below its test"),
        Case("mangled", canvas("mangled"), dump(duplicated_and_deleted(sol)), "graded", "full",
             "duplicated answer and test, deleted setup, answer turned to Markdown"),
        Case("jos-garc", f"Jos\udce9 Garc\udced_4242_assignsubmission_file_/{ASSIGNMENT}.ipynb".encode("utf-8", "surrogateescape"),
             dump(sol), "graded", "full", "a Moodle folder whose name is not UTF-8 (Latin-1)"),
    ]
    c += [Case(name, canvas(name), dump(split_attack(bug, name)), SPLIT_STATUS.get(name, "graded"), "atmost",
               f"split execution: {name}") for name in SPLIT_ATTACKS]
    others = [a for a in course.assignments() if a != ASSIGNMENT]
    if others:
        other = course.read_notebook(course.release_path(others[0]))
        c.append(Case("otherassignment", canvas("otherassignment"), dump(other), "wrong-assignment", "zero",
                      f"a notebook of {others[0]} handed in as {ASSIGNMENT}"))
    else:  # a one-notebook course: a foreign notebook has none of the release's cells
        foreign = nbformat.v4.new_notebook(cells=[new_code_cell("print('my own notebook')")])
        c.append(Case("otherassignment", canvas("otherassignment"), dump(foreign), "graded", "zero",
                      "a notebook of something else: every cell of the release is missing"))
    return c

"""Precision and recall of `report`'s similarity (autograder/similarity.py) on a synthetic class.

    python benchmarks/similarity.py [--honest 60] [--copies 20] [--seed 0]

For every assignment, a class of --honest independent students: each answer cell is the
solution's code, one of the catalog's correct variants or one of its bugs (autograder/mutants/,
really different code), drawn at random, and one cell in ten is left as the release gave it.
Then --copies planted copies, each of a different honest student, each made with a random
non-empty subset of: names renamed, reformatted (2-space indents, blank lines, spaces),
comments replaced, independent neighbouring statements swapped, one function moved into
another cell. The positives are the planted pairs; every other pair is a negative.

The threshold is tuned on the first three assignments (the multiple of 0.05 with the best F1
there) and precision and recall are reported on the other four at that threshold, and at
autograder.similarity.THRESHOLD (the value the report uses, set from this benchmark). Writes benchmarks/results/similarity.json.
"""
from __future__ import annotations

import argparse
import ast
import io
import random
import re
import sys
import time
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import similarity  # noqa: E402
from autograder.similarity import answer_cells  # noqa: E402
from autograder.course import assignments, read_notebook, release_path, solution_path  # noqa: E402
from autograder.mutants import default_catalogs, load_catalogs  # noqa: E402
from benchmarks.machine import save  # noqa: E402

TRANSFORMS = ("renamed", "reformatted", "comments", "reordered", "moved")
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
    no two students handing in the same catalog text in more than a quarter of the cells:
    independent students do not hand in identical code, and the catalog has only so many answers
    per cell. Stops short of n when 500 draws in a row find no such student."""
    most = max(1, len(pool) // 4)
    students: dict[str, dict] = {}
    for _ in range(500 * n):
        if len(students) == n:
            break
        cells = {cell: (given[cell] if rng.random() < 0.1 else rng.choice(options)) for cell, options in pool.items()}
        if all(sum(cells[c] == other[c] and cells[c] != given[c] for c in pool) <= most for other in students.values()):
            students[f"honest-{len(students):03d}"] = cells
    return students


# ------------------------------------------------------------------ what a copier changes


def _bound(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    return names - {"self"}


def rename(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Every local name a new name (attributes and keyword arguments untouched)."""
    out = {}
    for cell, source in cells.items():
        new = {name: f"{rng.choice(['my', 'tmp', 'val', 'res'])}_{name[::-1]}{rng.randint(0, 9)}"
               for name in _bound(source)}
        tokens, depth, previous, in_def = [], 0, None, False
        try:
            toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
        except (tokenize.TokenError, IndentationError):
            out[cell] = source
            continue
        for i, tok in enumerate(toks):
            string = tok.string
            depth += string in "([{" and tok.type == tokenize.OP
            depth -= string in ")]}" and tok.type == tokenize.OP
            if tok.type == tokenize.NAME and string in ("def", "lambda"):
                in_def = True
            elif tok.type == tokenize.NEWLINE or (string == ":" and depth == 0):
                in_def = False
            following = toks[i + 1].string if i + 1 < len(toks) else ""
            keyword_arg = depth > 0 and following == "=" and not in_def  # f(dim=1), not def f(dim=1)
            if tok.type == tokenize.NAME and string in new and previous != "." and not keyword_arg:
                string = new[string]
            tokens.append((tok.type, string))
            previous = tok.string
        out[cell] = tokenize.untokenize(tokens)
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


def reorder(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Neighbouring one-line assignments that do not use each other's names swapped."""
    out = {}
    for cell, source in cells.items():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            out[cell] = source
            continue
        lines = source.splitlines()
        swaps = []
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if not isinstance(body, list):
                continue
            for a, b in zip(body, body[1:]):
                if all(isinstance(s, ast.Assign) and s.lineno == s.end_lineno for s in (a, b)) \
                        and b.lineno == a.lineno + 1 and _independent(a, b):
                    swaps.append(a.lineno - 1)
        done = set()
        for i in swaps:
            if i not in done and i + 1 not in done:
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
                done |= {i, i + 1}
        out[cell] = "\n".join(lines)
    return out


def move(cells: dict[str, str], rng: random.Random) -> dict[str, str]:
    """One cell's code moved to the end of another cell; the emptied cell left blank."""
    out = dict(cells)
    filled = [c for c, s in cells.items() if s.strip()]
    if len(filled) >= 2:
        a, b = rng.sample(filled, 2)
        out[b] = cells[b] + "\n\n" + cells[a]
        out[a] = ""
    return out


CHANGES = {"renamed": rename, "reformatted": reformat, "comments": recomment, "reordered": reorder, "moved": move}


def plant(original: dict[str, str], rng: random.Random) -> tuple[dict[str, str], list[str]]:
    chosen = [t for t in TRANSFORMS if rng.random() < 0.6] or [rng.choice(TRANSFORMS)]
    cells = original
    for name in TRANSFORMS:  # renaming first: later steps work on the copier's own text
        if name in chosen:
            cells = CHANGES[name](cells, rng)
    return cells, chosen


# ------------------------------------------------------------------ measuring


def scored_class(assignment: str, honest: int, copies: int, rng: random.Random):
    """Every scored pair of a synthetic class of `assignment` (pair → score), the planted pairs,
    the seconds similarity took, and the number of hand-ins."""
    pool, given = variants(assignment)
    students = honest_class(pool, given, honest, rng)
    planted = {}
    for i, original in enumerate(rng.sample(sorted(students), copies)):
        cells, how = plant(students[original], rng)
        students[f"copy-{i:03d}"] = cells
        planted[frozenset((original, f"copy-{i:03d}"))] = how
    start = time.perf_counter()
    base = similarity.release_prints(given)
    hand_ins = [similarity.fingerprint_hand_in(s, cells, base) for s, cells in students.items()]
    pairs = similarity.similar_pairs(hand_ins, threshold=0.0)
    seconds = time.perf_counter() - start
    scores = {frozenset(p.students): p.score for p in pairs}
    return scores, planted, seconds, len(students)


def measure(scores: dict, planted: dict, threshold: float) -> dict:
    reported = {pair for pair, s in scores.items() if s >= threshold}
    found = reported & set(planted)
    missed = {"+".join(sorted(p)): planted[p] for p in planted if p not in reported}
    return {"reported": len(reported), "planted": len(planted), "found": len(found),
            "precision": len(found) / len(reported) if reported else 1.0,
            "recall": len(found) / len(planted) if planted else 1.0, "missed": missed}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--honest", type=int, default=60)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    runs = {name: scored_class(name, args.honest, args.copies, rng) for name in assignments()}
    names = list(runs)
    tune, held_out = names[:TUNE], names[TUNE:]
    threshold = tune_threshold([runs[n][:2] for n in tune])
    rows = {}
    for name in names:
        scores, planted, seconds, hand_ins = runs[name]
        rows[name] = {"part": "tune" if name in tune else "held out", "seconds": round(seconds, 2),
                      "hand_ins": hand_ins, "negative_pairs": hand_ins * (hand_ins - 1) // 2 - len(planted),
                      "highest_negative": round(max([s for p, s in scores.items() if p not in planted], default=0), 3),
                      "lowest_positive": round(min([scores.get(p, 0.0) for p in planted], default=1), 3),
                      **measure(scores, planted, threshold)}
        row = rows[name]
        print(f"{name:28} {row['part']:8}  precision {row['precision']:.3f}  recall {row['recall']:.3f}  "
              f"highest negative {row['highest_negative']:.3f}  lowest positive {row['lowest_positive']:.3f}  "
              f"{row['hand_ins']} hand-ins, {row['seconds']:.2f} s" + (f"  missed {row['missed']}" if row["missed"] else ""))
    held = {}
    for label, t in (("tuned", threshold), ("module", similarity.THRESHOLD)):
        counts = [measure(*runs[n][:2], t) for n in held_out]
        total = {key: sum(c[key] for c in counts) for key in ("reported", "planted", "found")}
        held[label] = {"threshold": t, "precision": total["found"] / total["reported"] if total["reported"] else 1.0,
                       "recall": total["found"] / total["planted"], **total}
    print(f"threshold tuned on {', '.join(tune)} (best F1): {threshold}")
    for label, h in held.items():
        print(f"held out ({len(held_out)} assignments, {h['planted']} planted pairs) at the {label} threshold "
              f"{h['threshold']}: precision {h['precision']:.3f}, recall {h['recall']:.3f}")
    save("similarity", {"honest": args.honest, "copies": args.copies, "seed": args.seed, "held_out": held,
                        "assignments": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

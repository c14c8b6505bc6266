"""Command line: python -m autograder {release,collect,repair,grade,export,feedback,report,demo,mutants,student-cells,dist} ..."""
from __future__ import annotations

import argparse
import io
import sys
from dataclasses import fields
from pathlib import Path

from autograder.course.layout import CourseError, assignments, check_assignment
from autograder.isolation.sandbox import Limits


def _names(given: list[str]) -> list[str]:
    return [check_assignment(n) for n in given] if given else assignments()


def cmd_release(args) -> int:
    from autograder.release.build import drift, release

    names = _names(args.assignments)
    from autograder.release import student_cells

    if args.check:
        stale = drift(names)
        if stale:
            print("notebooks/ is out of date for: " + ", ".join(stale) + "\nRun: python -m autograder release")
            return 1
        if student_cells.manifest_drift(assignments()):
            print(f"{student_cells.MANIFEST.name} is out of date\nRun: python -m autograder release")
            return 1
        print("notebooks/ matches a fresh release of: " + ", ".join(names))
        return 0
    for name, path in release(names).items():
        print(f"released {name} -> {path}")
    print(f"wrote {student_cells.write_manifest(assignments())}")
    return 0


def cmd_student_cells(args) -> int:
    from autograder.release import student_cells
    from autograder.course.config import load_config

    names = assignments()
    config = load_config()
    if args.check:
        bad = {}
        for name in names:
            found = student_cells.problems(student_cells.read_notebook(student_cells.solution_path(name)), name, config)
            if found:
                bad[name] = found
        readme = student_cells.README.read_text(encoding="utf-8")
        if student_cells.update_readme(readme, names, config) != readme:
            bad["README.md"] = ["the badge block is out of date"]
        for name, found in bad.items():
            print(f"{name}: " + "; ".join(found))
        if bad:
            print("Run: python -m autograder student-cells")
            return 1
        print("every solution notebook has the canonical badge, bootstrap and check cells")
        return 0
    for path in student_cells.rewrite(names, config):
        print(f"rewrote {path}")
    if not args.no_release:
        from autograder.release.build import release

        for name, path in release(names).items():
            print(f"released {name} -> {path}")
        print(f"wrote {student_cells.write_manifest(names, config)}")
    _warn_if_placeholder()
    return 0


def cmd_dist(args) -> int:
    from autograder.release.dist import build

    names = _names(args.assignments)
    files = build(Path(args.out), names, allow_placeholder=args.allow_placeholder)
    print(f"wrote the student distribution of {', '.join(names)} to {Path(args.out).resolve()} ({len(files)} files)")
    _warn_if_placeholder()
    return 0


def _warn_if_placeholder() -> None:
    from autograder.release.dist import placeholder_warning

    warning = placeholder_warning()
    if warning:
        print(warning)


def _limits(args) -> Limits:
    """Limits() with what the command line set (every field of Limits is an option)."""
    try:
        return Limits(**{f.name: getattr(args, f.name) for f in fields(Limits) if getattr(args, f.name) is not None})
    except ValueError as exc:  # limits that do not fit together
        raise CourseError(str(exc)) from None


def _add_limit_options(parser) -> None:
    for f in fields(Limits):
        parser.add_argument("--" + f.name.replace("_", "-"), type=int, metavar="N", help=f"{f.metadata['help']} (default {f.default})")


def cmd_grade(args) -> int:
    from autograder.grading.batch import grade, score_table
    from autograder.isolation.sandbox import describe
    from autograder.grading.workspace import open_workspace

    ws = open_workspace(args.workspace)
    results = grade(ws, [check_assignment(n) for n in args.assignments], args.student or None,
                    jobs=args.jobs, limits=_limits(args), cluster=args.cluster)
    print(score_table(results))
    where = f"on the Dask cluster {args.cluster}, the workers' own sandbox" if args.cluster else describe()
    print(f"\nsandbox: {where}\nreports: {ws.path('reports')}")
    return 0 if all(r.status == "graded" for r in results) else 1


def cmd_collect(args) -> int:
    from autograder.handins.collect import collect, format_report
    from autograder.grading.workspace import open_workspace

    ws = open_workspace(args.workspace)
    entries, report = collect(Path(args.source), ws)
    print(format_report(entries))
    print(f"report: {report}")
    return 0 if all(e.action != "not placed" for e in entries) else 1


def cmd_repair(args) -> int:
    from autograder.grading.batch import ensure_sources, submitted
    from autograder.grading.handin import prepare
    from autograder.grading.workspace import open_workspace

    ws = open_workspace(args.workspace)
    names = _names(args.assignments)
    ensure_sources(ws, names)
    problems = 0
    for name in names:
        for student in submitted(ws, name):
            if args.student and student not in args.student:
                continue
            _, early, changes = prepare(ws, student, name)
            if early is not None:
                problems += 1
                print(f"{name} {student}: {early.status}: {early.message}")
                continue
            print(f"{name} {student}: " + ("nothing to repair" if not changes else f"{len(changes)} repairs"))
            for change in changes:
                print(f"    {change}")
    return 1 if problems else 0


def cmd_feedback(args) -> int:
    from autograder.reports.feedback import feedback
    from autograder.grading.workspace import open_workspace

    ws = open_workspace(args.workspace)
    for path in feedback(ws, _names(args.assignments), args.student or None):
        print(f"wrote {path}")
    return 0


def cmd_export(args) -> int:
    from autograder.reports.export import export
    from autograder.grading.workspace import open_workspace

    ws = open_workspace(args.workspace)
    for path in export(ws, Path(args.out) if args.out else ws.path("export")):
        print(f"wrote {path}")
    return 0


def cmd_report(args) -> int:
    from autograder.reports.class_page import write
    from autograder.grading.workspace import open_workspace

    ws = open_workspace(args.workspace)
    for path in write(ws, _names(args.assignments), Path(args.out) if args.out else ws.path("report")):
        print(f"wrote {path}")
    return 0


def cmd_demo(args) -> int:
    from autograder.quality.demo import demo, print_demo

    results, problems = demo(args.workspace)
    print_demo(results, problems)
    return 1 if problems else 0


def cmd_mutants(args) -> int:
    from autograder.quality.mutants import report, run

    only = _names(args.assignment) if args.assignment else None
    outcomes = run([Path(p) for p in args.catalog] or None, only, args.jobs)
    if not outcomes:
        print("no mutants to run")
        return 0
    print(report(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="generate notebooks/ from solutions/ (refuses leaks)")
    p.add_argument("assignments", nargs="*", help="default: every assignment")
    p.add_argument("--check", action="store_true", help="only report whether notebooks/ is up to date")
    p.set_defaults(func=cmd_release)

    workspace_help = "grading workspace (default: $COURSE_WORKSPACE or ./grading, which git ignores)"

    def hand_ins(p, assignments_help="default: every assignment", student_help="only this student (repeatable)"):
        p.add_argument("assignments", nargs="*", help=assignments_help)
        p.add_argument("--student", action="append", help=student_help)
        p.add_argument("--workspace", help=workspace_help)

    p = sub.add_parser("collect", help="place the hand-ins of an LMS zip or a folder into WORKSPACE/submitted/")
    p.add_argument("source", help="a .zip file or a folder of hand-ins")
    p.add_argument("--workspace", help=workspace_help)
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("repair", help="restore the hand-ins' cells and metadata from the release (grade does it too)")
    hand_ins(p)
    p.set_defaults(func=cmd_repair)

    p = sub.add_parser("grade", help="repair and autograde the hand-ins in WORKSPACE/submitted/, each in a sandbox")
    hand_ins(p, "default: every assignment with hand-ins", "grade only this student (repeatable)")
    p.add_argument("--jobs", type=int, default=1, help="notebooks graded side by side (default 1)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="grade on Dask workers: a scheduler address (tcp://host:8786) or local:N "
                        "(a local cluster of N workers); needs pip install .[cluster]")
    _add_limit_options(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("export", help="write CSV files of the scores (totals and per question)")
    p.add_argument("--workspace", help=workspace_help)
    p.add_argument("--out", help="output folder (default: WORKSPACE/export)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("feedback", help="HTML feedback per student (pass/fail and messages, never hidden tests)")
    hand_ins(p)
    p.set_defaults(func=cmd_feedback)

    p = sub.add_parser("report", help="one page and a JSON file on the graded class: scores, failures, statuses, "
                                      "times and similar answers (runs nothing)")
    p.add_argument("assignments", nargs="*", help="default: every assignment graded in the workspace")
    p.add_argument("--workspace", help=workspace_help)
    p.add_argument("--out", help="output folder (default: WORKSPACE/report)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="release and grade demo hand-ins end to end, offline")
    p.add_argument("--workspace", help="keep the demo workspace here (default: a temporary folder)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("mutants", help="check that the tests catch the catalog's bugs and keep correct variants")
    p.add_argument("--catalog", action="append", default=[], help="catalog file (repeatable); default: autograder/mutants/")
    p.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    p.add_argument("--jobs", type=int, help="hand-ins graded side by side (default: one per core)")
    p.set_defaults(func=cmd_mutants)

    p = sub.add_parser("student-cells", help="write the Colab badge, setup bootstrap and check_submission cells into every solution, then release")
    p.add_argument("--check", action="store_true", help="only report notebooks whose cells are not in canonical form")
    p.add_argument("--no-release", action="store_true", help="do not regenerate notebooks/ and the manifest afterwards")
    p.set_defaults(func=cmd_student_cells)

    p = sub.add_parser("dist", help="write the student distribution (no solutions, no hidden tests, no autograder) to OUT")
    p.add_argument("out", help="output folder: new, or a previous distribution (its .git is kept)")
    p.add_argument("--allow-placeholder", action="store_true",
                   help="build even while [tool.course] repository is the placeholder (a local trial copy: "
                        "its Colab badges and setup cells cannot fetch the course)")
    p.add_argument("assignments", nargs="*", help="default: every assignment")
    p.set_defaults(func=cmd_dist)
    return parser


def main(argv: list[str] | None = None) -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):  # a student's name or a message never fails to print,
        sys.stdout.reconfigure(errors="backslashreplace")  # whatever the terminal's encoding (LANG=C, ascii)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

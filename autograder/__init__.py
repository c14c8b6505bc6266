"""The instructor's tool: release, collect, repair, grade (sandboxed, in parallel),
export, feedback, demo and mutation-test the course.

Run ``python -m autograder --help``. nbgrader is the engine; this package drives it
over the course layout (``solutions/`` → ``notebooks/``) and a grading workspace that
lives outside the tracked tree.
"""
import sys

# jsonschema (which nbformat and nbgrader import) loads the optional rfc3987_syntax package when it
# is installed (jupyter-events requires it), and that package compiles 38 grammars at import: 1.7
# CPU-s in every process of the grader that reads a notebook. Without it jsonschema only leaves the
# "iri" and "iri-reference" formats unchecked, which no notebook schema uses (benchmarks/README.md).
sys.modules.setdefault("rfc3987_syntax", None)

"""The instructor's tool: release, collect, repair, grade (sandboxed, in parallel),
export, feedback, demo and mutation-test the course.

Run ``python -m autograder --help``. nbgrader is the engine; this package drives it
over the course layout (``solutions/`` → ``notebooks/``) and a grading workspace that
lives outside the tracked tree.
"""

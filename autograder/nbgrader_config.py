# Base nbgrader configuration of the course. `autograder` copies this file into every
# workspace it drives (a release build or a grading workspace) as nbgrader_config.py.
from nbgrader.converters import Autograde

from autograder.sandbox import Limits

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "sequence-models"
# Per-cell time limit while autograding (the default of `grade --cell-timeout`, which passes
# its value on the command line). Solutions run their experiments in fast mode
# (NBGRADER_EXECUTION is set), so a cell that needs longer is stuck.
c.Execute.timeout = Limits().cell_timeout
c.Execute.interrupt_on_timeout = True
# The locked experiments are replaced by a comment just before the hand-in runs: they grade
# nothing (autograder/experiments.py).
c.Autograde.autograde_preprocessors = [
    "autograder.experiments.SkipExperiments",
    *Autograde.class_traits()["autograde_preprocessors"].default(),
]
# What a student finds in place of each solution region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Base nbgrader configuration of the course. `autograder` copies this file into every
# workspace it drives (a release build or a grading workspace) as nbgrader_config.py.
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute

from autograder.isolation.boundary.execute import SplitExecute

from autograder.isolation.sandbox import Limits

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "sequence-models"
# Per-cell time limit while autograding (the default of `grade --cell-timeout`, which passes
# its value on the command line). Solutions run their experiments in fast mode
# (NBGRADER_EXECUTION is set), so a cell that needs longer is stuck.
c.Execute.timeout = Limits().cell_timeout
c.Execute.interrupt_on_timeout = True
# The locked experiments are replaced by a comment just before the hand-in runs: they grade
# nothing (autograder/grading/experiments.py).
# The notebook runs split (autograder/isolation/boundary/execute.py): the student's cells in the sandboxed
# kernel, the test cells in a trusted runner.
c.Autograde.autograde_preprocessors = [
    "autograder.grading.experiments.SkipExperiments",
    *(SplitExecute if p is Execute else p for p in Autograde.class_traits()["autograde_preprocessors"].default()),
]
# What a student finds in place of each solution region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

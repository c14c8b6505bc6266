# Base nbgrader configuration of the course. `autograder` copies this file into every
# workspace it drives (a release build or a grading workspace) as nbgrader_config.py.
c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "sequence-models"
# Per-cell time limit while autograding. Solutions run their experiments in fast mode
# (NBGRADER_EXECUTION is set), so a cell that needs longer is stuck.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# What a student finds in place of each solution region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

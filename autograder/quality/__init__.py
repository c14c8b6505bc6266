"""The grader tried against itself: mutation testing of the graded test cells (`mutants`; the
catalog is autograder/mutants/) and the whole pipeline offline on the course's notebooks (`demo`).

It may import every stage below it.
"""

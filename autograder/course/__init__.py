"""The course as files: where they lie (`layout`), its [tool.course] configuration (`config`), and
notebooks and JSON read without trusting them (`wellformed`, `jsonscan`).

The lowest stage: it imports no other stage of the grader.
"""

"""What students get: the student notebooks built from solutions/ (`build`), the student
distribution and its README (`dist`, `templates/`), the cells every notebook shares on the
students' side (`student_cells`).

It may import `course`, `isolation`, `handins` and `grading` (a release is built in an nbgrader workspace).
"""

"""Grading: one hand-in (`handin`), a batch of them (`batch`) or a batch on Dask workers (`cluster`),
in an nbgrader workspace (`workspace`, configured by `nbgrader_config`), the gradebook it writes
(`gradebook`), the scores read back (`scores`), the locked experiments left out (`experiments`).

It may import `course`, `isolation` and `handins`.
"""

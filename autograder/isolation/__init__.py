"""What keeps student code away from the grades: the sandbox and the kernel launcher, the guard in
the kernel, the fork server kernels start from, the boundary between the student's kernel and the
trusted runner of the test cells (`boundary/`), the processes nbgrader runs in, bounded waits, and
the scratch folders removed whatever ends a process.

The only stage that runs student code: nothing outside it starts a kernel or executes code
(tests/test_layers.py). It may import `autograder.course`.
"""

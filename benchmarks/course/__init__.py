"""The course's experiments, too long for a notebook: each records its figures in benchmarks/results/."""

"""The grader's speed, scale and bounds: each records its figures in benchmarks/results/."""

"""Load tests (locust) and the benchmark suite: every figure beside a reference measured in the same run."""

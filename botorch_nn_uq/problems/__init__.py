"""Benchmark problems: BO test functions and their regret metrics."""

"""Benchmarks that run Planloop and a baseline side by side and print the ratios."""

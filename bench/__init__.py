"""Benchmarks (scripts, not tests): `python bench/throughput.py --help`."""

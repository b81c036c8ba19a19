"""Benchmarks, run from a checkout (`python benchmarks/speed.py`, `python benchmarks/benchmark_multi30k.py ...`);
`benchmarks.report` holds what their reports share."""

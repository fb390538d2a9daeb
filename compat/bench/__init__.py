"""`streamgate bench`: one runner for the benchmarks. Declarative workloads (the TOML files
in workloads/, executed by `kvs`) and named scenarios (the procedural compat/bench_*.py
scripts, `scenarios`), results written outside the source tree (harness.results)."""

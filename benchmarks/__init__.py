"""Hand-run benchmarks; results go to benchmarks/RESULTS.md (never asserted in tests)."""

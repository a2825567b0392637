"""The benchmark's scenarios, S1 to S6 (bench/README.md), one module per kind of measurement."""

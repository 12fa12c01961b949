"""a2a-push benchmarks B1-B5 (DESIGN.md "Performance targets").

``python -m benchmarks`` runs them all; ``python -m benchmarks b2`` runs one. Numbers are
printed, never asserted: no test depends on timing.
"""

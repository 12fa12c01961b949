"""Runnable examples: ``python -m examples.demo`` (``make demo``)."""

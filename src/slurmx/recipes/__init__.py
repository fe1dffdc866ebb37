"""Serving recipes (jobs/*.yaml): the base vLLM flags and env every arm shares, and per-arm deltas."""

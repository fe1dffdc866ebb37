"""InferenceX's own scripts as the oracle: capture what they start, compare it with slurmx's render."""

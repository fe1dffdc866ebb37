"""Config files: InferenceX master configs and slurmx cluster profiles."""

"""`slurmx advise`: a point's trace through a model of the engine's prefix cache, before anything runs."""

"""Everything that talks to Slurm: requests, submission, the ledger, batched accounting."""

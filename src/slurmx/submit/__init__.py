"""The submit stage (`stage.py`) and what it resolves per point. The package itself imports nothing: `slurmx
plan` reads `resolved.point_request` without paying for submitit, the ledger and the job body's code."""

"""Sweep history: every result of one or more results trees indexed in a database (SQLite or PostgreSQL),
and the series `slurmx history` reads from it, with changes judged against the measured noise floor."""

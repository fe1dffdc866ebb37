"""What runs on the compute node: supervisor, preflight, backends, replay and the job body."""

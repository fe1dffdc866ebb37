"""What the node writes: aiperf artifacts -> result.json (schema, aggregation, energy, evidence, validity gate)."""

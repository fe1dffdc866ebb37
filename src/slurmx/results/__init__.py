"""aiperf artifacts -> result.json (schema, aggregation, validity gate); collection and plots."""

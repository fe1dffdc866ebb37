"""The results tree: layout, point state, result.json schema, aggregation and collection."""

"""The ground floor every stage stands on: results-tree layout, point state, the ledger's records,
atomic writes and locks. It holds the typed records of the vocabularies below it and knows no stage."""

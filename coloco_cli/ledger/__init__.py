"""`coloco ledger`: run the ledger service."""

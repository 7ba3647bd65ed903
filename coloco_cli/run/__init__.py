"""`coloco run`: organisers open, inspect, list and close training runs on the ledger."""

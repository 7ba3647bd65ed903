"""`coloco devnet`: a local anvil chain to try coloco on."""

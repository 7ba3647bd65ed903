"""`coloco keys`: named accounts and node keys (encrypted eth-account keystores)."""

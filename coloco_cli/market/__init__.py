"""`coloco market`: the compute market's commands (offers, requests, leases, challenges)."""

"""`coloco market`: the compute market (leases here; offers and challenges join this group)."""

"""`coloco market`: the compute market's commands."""

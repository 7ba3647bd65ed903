"""`coloco node`: what a node operator does (register, stake, run, status)."""

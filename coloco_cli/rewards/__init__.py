"""`coloco rewards`: what a payout address is owed, and claiming it."""

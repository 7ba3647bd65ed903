"""The compute market (docs/ledger.md, "The compute market"): ranking and offers."""

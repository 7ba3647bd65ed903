"""Level 3: the replay audit (``ledger.audit.replay``) and its sampler (``ledger.audit.sample``)."""

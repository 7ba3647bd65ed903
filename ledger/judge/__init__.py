"""Stage 3, the verdicts: levels 1-3 for one round (:mod:`.verdicts`), the tensor checks
(:mod:`.tensors`, :mod:`.steps`, :mod:`.usefulness`), the ledger's own outer step
(:mod:`.outer_step`), the replay audit (:mod:`.replay`) and the pure reward rules (:mod:`.rules`).
"""

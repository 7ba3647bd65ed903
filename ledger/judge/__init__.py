"""Stage 3, the verdicts: levels 1-3 for one round, run in order by :mod:`.verdicts` (the entry
point) over the entries of :mod:`.entries`: the attestation's claims (:mod:`.claims`), its
pseudo-gradient loaded and decoded (:mod:`.pseudo_gradients`), the round's magnitudes, directions
and copies (:mod:`.comparisons`), usefulness and the first-step probe (:mod:`.scores`), the result
checkpoint (:mod:`.result`), the replay audit's selection and replays (:mod:`.audits`), the reward
split (:mod:`.rewards`) and the fraud records (:mod:`.fraud`). Beneath them: the tensor checks
(:mod:`.tensors`, :mod:`.steps`, :mod:`.usefulness`), the ledger's own outer step
(:mod:`.outer_step`), the replay (:mod:`.replay`) and the pure reward rules (:mod:`.rules`).
"""

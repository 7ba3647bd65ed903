"""One round of a node, in order: recover (:mod:`.recovery`), read the governed config
(:mod:`.runconfig`), train the inner steps and step outward (:mod:`.diloco`, :mod:`.timebox`),
attest (:mod:`.attest`); :mod:`.node` drives the rounds, one round procedure with a schedule
(:mod:`.schedule`: lockstep, or :mod:`.overlap`, the delayed outer step).
"""

"""Stage 2, a round's life: open -> closing -> scored (:mod:`.lifecycle`), and bounded retention
of the audit trail (:mod:`.retention`). The rounds' states are kept in
:mod:`ledger.core.round_book` and closed runs in :mod:`ledger.intake.closing`, which the intake
and the routes share.
"""

"""Stage 2, a round's life: open -> closing -> scored (:mod:`.lifecycle`), closed runs
(:mod:`.closing`), bounded retention of the audit trail (:mod:`.retention`).
"""

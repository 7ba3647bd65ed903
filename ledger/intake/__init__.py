"""Stage 1, intake: level-0 checks (:mod:`.verify`), signed joins (:mod:`.membership`), closed
runs (:mod:`.closing`), and the group-committed write of each accepted attestation
(:mod:`.accept`, :mod:`.group_writer`, :mod:`.jobs`).
"""

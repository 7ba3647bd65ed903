"""What a node says to others: membership over the rendezvous (:mod:`.membership`,
:mod:`.rendezvous`), signed coordination (:mod:`.coordination`), the all-reduce (:mod:`.comm`,
:mod:`.allreduce`), peer checkpoints (:mod:`.peer_checkpoint`) and the ledger
(:mod:`.ledger_client`).
"""

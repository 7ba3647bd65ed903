"""What a node says to others: membership over the rendezvous (:mod:`.membership`, the closed
lists in :mod:`.members`, :mod:`.rendezvous`), the process group of a list (:mod:`.group`), the
host's successor (:mod:`.failover`), signed coordination (:mod:`.coordination`), the all-reduce
(:mod:`.comm`, :mod:`.allreduce`), peer checkpoints (:mod:`.checkpoint_board`,
:mod:`.peer_checkpoint`) and the ledger (:mod:`.ledger_client`).
"""

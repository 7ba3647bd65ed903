"""Coordination that trusts no one: every message between nodes is signed and checked.

- :mod:`~trainer.network.coordination.registry`: who may speak (registered and active on chain).
- :mod:`~trainer.network.coordination.board`: signed posts and checked reads over the rendezvous
  store, with every refused message logged and kept as a
  :class:`~trainer.network.coordination.board.Refusal`.
- :mod:`~trainer.network.coordination.store`: the store connection, with failover to a successor
  host.
- :mod:`~trainer.network.coordination.heartbeat`: liveness while a collective runs.
- :mod:`~trainer.network.coordination.ledger_view`: what the ledger says of the round's members.

The round's config, read by every node at the agreed block and compared through signed
read-outs, is a stage of the round: :mod:`trainer.round.agreement`. The envelope itself,
:class:`protocol.coordination.SignedMessage`, is defined once in protocol/.
"""

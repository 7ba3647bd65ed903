"""The red team of real nodes (``python -m bench.redteam``, :mod:`bench.redteam.__main__`): the
cheating strategies (:mod:`bench.redteam.cheats`, hooks of :class:`trainer.round.strategy.Strategy`
that :class:`trainer.round.node.NodeRunner` calls), one node process (:mod:`bench.redteam.procs`),
the network that runs them against anvil and the ledger and scores the run
(:mod:`bench.redteam.realnet`) and its settings on chain (:mod:`bench.redteam.config`).
``tests/redteam`` runs a quick subset of it, and keeps the in-process network of its own."""

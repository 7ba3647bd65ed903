"""Stage 4, the chain: the ledger's client (:mod:`.client`), the indexer (:mod:`.indexer`,
:mod:`.funding_index`), settlement of scored rounds (:mod:`.settlement`), ETH for compute
(:mod:`.funding`, :mod:`.pools`) and slash proposals (:mod:`.slash`).
"""

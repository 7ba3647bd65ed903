"""The read model: receipts from the indexed tables (:mod:`.receipts`) and the operators' metrics
(:mod:`.metrics`).
"""

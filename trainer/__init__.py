"""coloco trainer: model, data, DiLoCo, wire codec, membership, node loop, ledger client."""

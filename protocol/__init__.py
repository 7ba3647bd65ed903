"""coloco's shared protocol: signed attestations, reward trees, hashing, keys, the chain client."""

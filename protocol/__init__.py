"""coloco's shared protocol: signed attestations, reward trees, hashing, keys and the chain client."""

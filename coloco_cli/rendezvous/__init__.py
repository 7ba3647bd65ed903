"""`coloco rendezvous`: host a run's rendezvous store, so that no node has to."""

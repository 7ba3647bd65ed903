"""What node and ledger compute bit for bit: the model, the data shard, the inner and outer steps,
the wire codec, the pseudo-gradient commitment, the checkpoint format, usefulness, the
single-process mean and the governed training settings.

Layer: above :mod:`protocol` only. ``trainer`` and ``ledger`` both import it; it imports neither.
"""

"""What every stage of the ledger shares: settings (:mod:`.config`), the database
(:mod:`.db`, :mod:`.models`, :mod:`.schemas`), blobs (:mod:`.blobstore`), the rounds' states
(:mod:`.round_book`), logging, secrets, retries and the leader
lock. It imports no other part of the ledger.
"""

"""The ledger's dashboard: server-rendered pages at `/`, each also as JSON (`?format=json`).

Runs and their rounds (live), the loss curve of the committed checkpoints, nodes with their stake
and the rounds they worked, each node's receipts, proposals with their state and votes, and how
to claim and vote. Templates and assets ship with the package (no CDN). `install(app)` registers
it on the ledger's FastAPI app.
"""

from ledger.dashboard.routes import install

__all__ = ["install"]

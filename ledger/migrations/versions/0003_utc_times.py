"""timezone-aware times: timestamptz on PostgreSQL

Revision ID: 0003_utc_times
Revises: 0002_blob_uploader
Create Date: 2026-11-30 16:20:00

The first schema made naive ``timestamp`` columns while the ledger writes aware UTC values:
PostgreSQL converted them through the session's TimeZone, so with a database in
America/New_York a round opened "five hours ago" and closed at once. Existing values were
written as UTC wall times, so they are read back ``AT TIME ZONE 'UTC'``. SQLite has no zoned
type (ledger.core.models.UtcDateTime keeps UTC there): nothing to change.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_utc_times"
down_revision = "0002_blob_uploader"
branch_labels = None
depends_on = None

COLUMNS = {
    "attestation": ("received_at",),
    "rejection": ("created_at",),
    "run": ("created_at",),
    "ledger_round": ("opened_at", "deadline_at", "closed_at"),
    "settlement": ("created_at",),
    "blob": ("created_at",),
}


def _convert(aware: bool) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(
                table,
                column,
                type_=sa.DateTime(timezone=aware),
                existing_type=sa.DateTime(timezone=not aware),
                postgresql_using=f"{column} AT TIME ZONE 'UTC'",
            )


def upgrade() -> None:
    _convert(aware=True)


def downgrade() -> None:
    _convert(aware=False)

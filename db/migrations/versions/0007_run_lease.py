"""run lease: the token of the driver that owns a running run (a takeover by --resume replaces it)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("lease", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease")

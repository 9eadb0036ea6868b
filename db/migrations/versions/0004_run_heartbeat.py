"""run heartbeat: the host and process of a run's driver, and when it last said it was alive

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("host", sa.String(200)))
        batch.add_column(sa.Column("pid", sa.Integer))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("pid")
        batch.drop_column("host")

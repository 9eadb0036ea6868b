"""measurement reuse: what each measurement depends on (a key), and which earlier one a reused one copies

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("measurement_key", sa.String(64)))
        batch.add_column(sa.Column("reused_from", sa.Integer))
        batch.create_index("ix_evaluations_measurement_key", ["measurement_key"])


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_index("ix_evaluations_measurement_key")
        batch.drop_column("reused_from")
        batch.drop_column("measurement_key")

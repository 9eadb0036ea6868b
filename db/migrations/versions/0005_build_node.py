"""build node: where each evaluated genome was compiled (a Ray cluster spreads builds over its nodes)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("build_node", sa.String(200)))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("build_node")

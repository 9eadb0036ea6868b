"""gate checks: the hard gate (re-verify + re-time N times) run before a target is reported met

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gate_checks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("individual_id", sa.Integer, sa.ForeignKey("individuals.id", ondelete="CASCADE"), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("target_s", sa.Float, nullable=False),
        sa.Column("rounds", sa.JSON, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gate_checks_run_id", "gate_checks", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_gate_checks_run_id", table_name="gate_checks")
    op.drop_table("gate_checks")

"""shape measurements: every timed (individual, shape) with the anchor timed beside it; gate targets per shape

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shape_measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("individual_id", sa.Integer, sa.ForeignKey("individuals.id", ondelete="CASCADE"), nullable=False),
        sa.Column("evaluation_id", sa.Integer, sa.ForeignKey("evaluations.id", ondelete="CASCADE"), nullable=False),
        sa.Column("shape", sa.String(200), nullable=False),
        sa.Column("dims", sa.JSON),
        sa.Column("median_s", sa.Float, nullable=False),
        sa.Column("p90_s", sa.Float, nullable=False),
        sa.Column("stdev_s", sa.Float, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("complete", sa.Boolean, nullable=False),
        sa.Column("verified", sa.Boolean, nullable=False),
        sa.Column("max_abs_error", sa.Float),
        sa.Column("anchor_s", sa.Float),
        sa.Column("anchor_p90_s", sa.Float),
    )
    op.create_index("ix_shape_measurements_run_id", "shape_measurements", ["run_id"])
    op.create_index("ix_shape_measurements_individual_id", "shape_measurements", ["individual_id"])
    with op.batch_alter_table("gate_checks") as batch:  # SQLite rebuilds the table for the nullability change
        batch.alter_column("target_s", existing_type=sa.Float, nullable=True)
        batch.add_column(sa.Column("targets", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("gate_checks") as batch:
        batch.drop_column("targets")
        batch.alter_column("target_s", existing_type=sa.Float, nullable=False)
    op.drop_index("ix_shape_measurements_individual_id", table_name="shape_measurements")
    op.drop_index("ix_shape_measurements_run_id", table_name="shape_measurements")
    op.drop_table("shape_measurements")

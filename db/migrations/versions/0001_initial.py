"""initial schema: runs, individuals, lineage edges, evaluations

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("family", sa.String(200), nullable=False),
        sa.Column("strategy", sa.String(50), nullable=False),
        sa.Column("target", sa.String(50)),
        sa.Column("target_seconds", sa.Float),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("status", sa.String(30), nullable=False),
        sa.Column("message", sa.Text),
        sa.Column("hardware", sa.JSON),
        sa.Column("anchor", sa.JSON),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("finished_at", TIMESTAMP),
    )
    op.create_table(
        "individuals",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("genome_id", sa.String(32), nullable=False),
        sa.Column("genome", sa.JSON, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("origin", sa.String(20), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.UniqueConstraint("run_id", "genome_id", name="uq_individual_genome_per_run"),
    )
    op.create_index("ix_individuals_run_id", "individuals", ["run_id"])
    op.create_table(
        "lineage_edges",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("parent_id", sa.Integer, sa.ForeignKey("individuals.id", ondelete="CASCADE"), nullable=False),
        sa.Column("child_id", sa.Integer, sa.ForeignKey("individuals.id", ondelete="CASCADE"), nullable=False),
        sa.Column("operator", sa.String(50), nullable=False),
        sa.Column("changed_knobs", sa.JSON, nullable=False),
    )
    op.create_index("ix_lineage_edges_run_id", "lineage_edges", ["run_id"])
    op.create_index("ix_lineage_child", "lineage_edges", ["child_id"])
    op.create_index("ix_lineage_parent", "lineage_edges", ["parent_id"])
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("individual_id", sa.Integer, sa.ForeignKey("individuals.id", ondelete="CASCADE"),
                  nullable=False, unique=True),
        sa.Column("status", sa.String(30), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("fitness_s", sa.Float),
        sa.Column("build_s", sa.Float, nullable=False),
        sa.Column("screen_s", sa.Float, nullable=False),
        sa.Column("verify_s", sa.Float, nullable=False),
        sa.Column("benchmark_s", sa.Float, nullable=False),
        sa.Column("build_stats", sa.JSON),
        sa.Column("checks", sa.JSON, nullable=False),
        sa.Column("timings", sa.JSON, nullable=False),
        sa.Column("anchor", sa.JSON, nullable=False),
        sa.Column("artifact_key", sa.String(64)),
        sa.Column("worker", sa.String(200), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    op.create_index("ix_evaluations_status", "evaluations", ["status"])


def downgrade() -> None:
    op.drop_table("evaluations")
    op.drop_table("lineage_edges")
    op.drop_table("individuals")
    op.drop_table("runs")

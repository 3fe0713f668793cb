"""The revisions, one module each, applied in order by Alembic."""

"""prunestore's Alembic migrations; installed as ``prunestore.migrations``."""

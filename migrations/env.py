"""Alembic environment for prunestore.

Driven from code (`prunestore.migrate`): the caller passes an open
connection in ``config.attributes["connection"]``; the ``sqlalchemy.url``
option is the fallback for running Alembic by hand.
"""

from alembic import context
from sqlalchemy import create_engine

VERSION_TABLE = "prunestore_alembic_version"


def _run(connection) -> None:
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()

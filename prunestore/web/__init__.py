"""`prunestore serve`: a read-only web view of a store, for operators (needs the ``web`` extra).

See `prunestore.web.app` for the pages; `create_app` makes the ASGI application.
"""

from .app import create_app

__all__ = ["create_app"]

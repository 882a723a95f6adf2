"""Storage: the tables, their SQL, and the connections that run it.

`schema` names the tables; `rows` every column list and row decoder;
`sessions` the session row and its lock; `locked_rows` the engine's `Rows`
over one locked session and the write-back; `undo` the append journal;
`settings` the store's recorded policy; `driver` and `db` the connections,
transactions and migrations; `sessionids` and `partitions` the layout.
"""

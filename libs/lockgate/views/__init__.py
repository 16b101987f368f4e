"""The read side: the record folded into views that answer queries, on SQLite or PostgreSQL."""

"""PostgreSQL with pgvector: where it is, its schema, the memories, search and the bookkeeping."""

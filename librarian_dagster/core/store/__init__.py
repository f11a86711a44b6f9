"""PostgreSQL with pgvector, database access only: schema, memories, files, bookkeeping."""

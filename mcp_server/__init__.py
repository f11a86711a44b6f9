"""The recall server: MCP tools and the prompt hook's `POST /recall` over one store.

The server embeds one short question at a time; the local embedder holds numpy's BLAS to one
thread for that reason (its threads spin and wait on each other: on a busy two-core machine they
took the query embedding's p95 from 43 ms to 674 ms), see librarian_dagster/core/embeddings.py.
"""

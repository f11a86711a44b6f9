"""The recall server: MCP tools and the prompt hook's `POST /recall` over one store.

The server embeds one short question at a time. OpenBLAS's thread pool helps big batches, but
for a single query its threads spin and wait on each other: on a busy two-core machine that took
the query embedding's p95 from 43 ms to 674 ms (benchmarks/recall_latency.py). So the server
asks for one thread, unless the user set it, before numpy is imported: OpenBLAS then starts no
threads at all (the local embedder also holds BLAS to one thread once loaded, for every process
that embeds: librarian_dagster/core/embeddings.py).
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

"""The recall server: MCP tools and the prompt hook's `POST /recall` over one store.

OpenBLAS's threads spin after each call they share, and on a busy two-core machine that took the
query embedding's p95 from 43 ms to 674 ms (benchmarks/recall_latency.py, when the embedder ran on
numpy). The embedder now runs on ONNX Runtime on the caller's thread (core/models/minilm.py),
but whatever numpy work is left in the server should not start such threads either: so the server
asks OpenBLAS for one thread, unless the user set it, before numpy is imported.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

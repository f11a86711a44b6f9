"""The recall server: MCP tools and the prompt hook's `POST /recall` over one store.

OpenBLAS's threads spin after each call they share; on a busy two-core machine that
multiplied a numpy embedding's p95 by fifteen (decisions 0002, 0004). The embedder runs on ONNX
Runtime on the caller's thread, but the numpy work left in the server (relevance, calibration)
should not start such threads either: so the server asks OpenBLAS for one thread, unless the
user set it, before numpy is imported.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

"""Answering a question: ranking, judging relevance, BM25, and measuring how well it answers."""

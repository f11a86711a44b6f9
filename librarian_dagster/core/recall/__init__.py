"""Answering a question: terms, candidates, ranking, relevance, results, evaluation."""

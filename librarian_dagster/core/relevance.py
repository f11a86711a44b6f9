"""How sure recall is that a remembered session answers a question: a probability, 0 to 1.

Ranks say which session is best for a question, not whether any is good: the fused rank scores of
a question nothing answers look like those of one that is answered. So each ranked session also
gets a relevance from two features of its exchange chunks (the session's own words):

- `cosine`: the best cosine similarity between the question and one of its chunks;
- `coverage`: the share of the question's IDF mass (BM25's idf, over PostgreSQL's English
  lexemes) present in its best-BM25 chunk. A question about a thing the store never saw
  ("Ollama", "protobuf") has lexemes no chunk holds; they carry the largest idf and are never
  covered, so coverage falls exactly where a near miss would fool the vectors.

A logistic model turns them into a probability. Its weights were fitted on the top result of
each dev question (86 golden + 16 negatives), checked on held-out halves and leave-one-out
(docs/decisions/0010). Being a probability, the threshold means the same from question to
question. Recall answers when its best session reaches the threshold, and answers nothing
otherwise.
"""

import math

WEIGHT_COSINE = 9.82
WEIGHT_COVERAGE = 5.33
BIAS = -6.97

DEFAULT_THRESHOLD = 0.45
"""Recall answers nothing when no session reaches this (LIBRARIAN_RECALL_THRESHOLD).

Measured on the dev questions (answerable recall@5 / MRR, negatives answered with nothing,
answerable wrongly answered with nothing): 0.50 -> 0.963 / 0.928, 15/16, 2/81; 0.45 -> 0.975 /
0.941, 15/16, 1/81; 0.40 -> 0.975 / 0.941, 13/16, 1/81. 0.45 is the lowest value that still
abstains as often as 0.5 on the negatives."""


def relevance(cosine: float, coverage: float) -> float:
    z = WEIGHT_COSINE * cosine + WEIGHT_COVERAGE * coverage + BIAS
    return 1.0 / (1.0 + math.exp(-z))

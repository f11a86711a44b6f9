"""How sure recall is that a remembered session answers a question: a probability, 0 to 1.

Ranks say which session is best for a question, not whether any is good: the fused rank scores of
a question nothing answers look like those of one that is answered. So the best ranked session is
also judged on evidence that means the same in any store, whatever its project or embedding model
(docs/decisions/0021):

- how close the question is to the session, two ways: its best chunk of either layer (an exchange
  window, the session's own words, or a digest line: whoever wrote the digest, a line an LLM wrote
  in its own words counts as much as the transcript), and the session as a whole (the mean of its
  exchange vectors). Each cosine is standardized against the embedding space's background,
  measured on the store itself (`SpaceCalibration`): how alike two unrelated chunks of this store
  are under this model. A cosine of 0.45 is close for all-MiniLM-L6-v2 and far for a model whose
  unrelated chunks already sit at 0.6; standardized, both say how far above chance a match stands.
- whether the question names something the memory has never seen. A question about "Mercurial" or
  "protobuf" in a store that never held the word is about a thing no session did, however close
  the rest of it comes (a near miss: the project's own world, a thing it never did). Names are the
  question's capitalised, all-caps or code-shaped words, and the words general text hardly uses
  in any language (`named_terms`); the share of the question's idf mass they carry unseen is
  `unseen`. Plain words a user picks to describe what they saw ("scribbled", "sluggish") are not
  names: their absence says nothing.

The word overlap of a best chunk (BM25 coverage) is left out on purpose: it is what a question in
a user's own words lacks, and it made answerable paraphrases look unanswerable.

A logistic model turns the evidence into a probability; its weights were fitted on the dev
questions of three projects in one store and checked leaving each project out
(benchmarks/fit_relevance.py, which refits and reports them).
"""

import math
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from librarian_dagster.core.settings import default

if TYPE_CHECKING:  # numpy is imported where a space is measured: every command reads this module
    import numpy as np

WEIGHTS = (0.854, 0.611, -9.405)
"""Of `features`: the best chunk's standardized cosine, the session's, the unseen names' share."""
BIAS = -0.527

DEFAULT_THRESHOLD: float = default("recall_threshold")
"""Recall answers nothing when its best session does not reach this (LIBRARIAN_RECALL_THRESHOLD).
Measured in docs/decisions/0021."""


@dataclass(frozen=True)
class SpaceCalibration:
    """How alike unrelated texts are in one embedding space, measured on the store's own chunks.

    `chunk_*`: cosine between two chunks of different sessions; `session_*`: between a chunk and
    another session's mean vector. Mean and standard deviation of each.
    """

    chunk_mean: float
    chunk_sd: float
    session_mean: float
    session_sd: float

    @classmethod
    def from_sample(
        cls,
        vectors: "np.ndarray",
        sessions: Sequence[str],
        session_vectors: "np.ndarray",
        session_ids: Sequence[str],
    ) -> "SpaceCalibration | None":
        """From sampled chunk vectors (with their sessions) and some sessions' mean vectors.

        None when the sample is too small to say (fewer than MIN_SAMPLE chunks or
        MIN_SESSIONS sessions): the caller then keeps `DEFAULT_CALIBRATION`.
        """
        import numpy as np

        if len(vectors) < MIN_SAMPLE or len(set(sessions)) < MIN_SESSIONS:
            return None
        chunks = _unit(vectors)
        owner = np.asarray(sessions)
        other = owner[:, None] != owner[None, :]
        pairs = (chunks @ chunks.T)[other]
        means = _unit(session_vectors)
        apart = owner[:, None] != np.asarray(session_ids)[None, :]
        to_sessions = (chunks @ means.T)[apart]
        if not len(pairs) or not len(to_sessions):
            return None
        return cls(
            float(pairs.mean()),
            max(float(pairs.std()), 1e-3),
            float(to_sessions.mean()),
            max(float(to_sessions.std()), 1e-3),
        )


MIN_SAMPLE = 200
MIN_SESSIONS = 10
CALIBRATION_SAMPLE = 2000
"""Chunks drawn to calibrate a space: its figures moved by about 0.01 between draws of 300 to
2,000 on the dev store."""

DEFAULT_CALIBRATION = SpaceCalibration(0.192, 0.136, 0.271, 0.149)
"""all-MiniLM-L6-v2 on the dev store of three projects (266 sessions): the background a store too
small to measure its own is judged against."""


@dataclass(frozen=True)
class Evidence:
    """What a ranked session shows for a question (a cosine is None: no chunk of that kind)."""

    exchange_cosine: float | None
    digest_cosine: float | None
    session_cosine: float | None
    unseen: float
    """The share of the question's idf mass in names that no stored chunk holds."""


def features(
    evidence: Evidence, calibration: SpaceCalibration = DEFAULT_CALIBRATION
) -> tuple[float, float, float] | None:
    """What the model weighs (in the order of WEIGHTS), or None when the session has no chunk.

    The best chunk is that of either layer: whichever says it better, the session's own words
    or its digest's, answers. A session without a mean vector is taken as close as a whole as
    its best chunk."""
    c = calibration
    layers = [
        (cosine - c.chunk_mean) / c.chunk_sd
        for cosine in (evidence.exchange_cosine, evidence.digest_cosine)
        if cosine is not None
    ]
    if not layers:
        return None
    best = max(layers)
    session = evidence.session_cosine
    whole = best if session is None else (session - c.session_mean) / c.session_sd
    return best, whole, evidence.unseen


def relevance(evidence: Evidence, calibration: SpaceCalibration = DEFAULT_CALIBRATION) -> float:
    """The probability that the session answers the question."""
    weighed = features(evidence, calibration)
    if weighed is None:
        return 0.0
    z = math.fsum(w * x for w, x in zip(WEIGHTS, weighed, strict=True)) + BIAS
    # Bounded: a space whose background barely varies can standardize a cosine to thousands.
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


# A word that starts after one of these (or the text's start) is capitalised as a sentence's
# first word, which says nothing about it being a name.
_SENTENCE_END = ".?!:;\"'(\u2014-"
_WORD = re.compile(r"[A-Za-z0-9][\w.+#/-]*")
_CODE_SHAPED = re.compile(r"[._/#+]|\d|[a-z][A-Z]")


JARGON_ZIPF = 1.8
"""A word rarer than this in general text, in every one of GENERAL_LANGUAGES, is taken for a
thing's name however it is written ("protobuf", "zerolog", "submodules"): 1.8 on wordfreq's Zipf
scale is about 60 uses in a billion words. Any value from 1.55 to 2.2 gave the same gate on the dev
questions (decision 0021); above that, the rare plain words users pick to tell what they saw
("misbehaved", "predating") start to count against their answers."""
TYPO_OF_ZIPF = 2.0
"""A rare word one edit away from a word at least this common is that word mistyped, not jargon."""
GENERAL_LANGUAGES = ("en", "pt")
"""A word common in one of these is a word, not a name: the languages of the dev projects'
questions. The two add 27 MB to a process that reads them, seven 61 MB (decision 0021)."""


def named_terms(question: str, store_holds: Callable[[set[str]], bool] | None = None) -> str:
    """The question's names, space-separated: words capitalised inside a sentence, all-caps
    words, code-shaped ones (dots, slashes, digits, camelCase), and jargon (`is_jargon`).
    Hyphenated names are split into their parts, so "GPG-signed" asks about "GPG", not about the
    compound; a hyphenated compound of plain words ("beer-themed") is a description, not jargon.

    `store_holds(words)`, when given, says whether the store holds any of the words: a jargon
    word one edit away from one it holds is that word mistyped ("gitlaeks" for "gitleaks"), not
    a name."""
    names = []
    for match in _WORD.finditer(question):
        word = match.group(0).rstrip(".-/")
        before = question[: match.start()].rstrip()
        sentence_start = not before or before[-1] in _SENTENCE_END
        if (
            _CODE_SHAPED.search(word)
            or (len(word) > 1 and word.isupper())
            or (len(word) > 1 and word[0].isupper() and not sentence_start)
            or ("-" not in word and is_jargon(word, store_holds))
        ):
            names.append(word.replace("-", " "))
    return " ".join(names)


def is_jargon(word: str, store_holds: Callable[[set[str]], bool] | None = None) -> bool:
    """Whether general text hardly uses the word in any language of GENERAL_LANGUAGES, and it is
    no common word mistyped (one letter dropped, added or changed, or two swapped), nor, with
    `store_holds`, a word the store holds mistyped."""
    word = word.lower()
    common, typed_for = _common_words()
    if _held(common, [word]).any():
        return False
    variants = _one_edit(word)
    if _held(typed_for, variants).any():
        return False
    return store_holds is None or not store_holds(variants)


def load_word_lists() -> None:
    """Read the word lists now, not at the first question (about 0.3 s)."""
    _common_words()


_common: "tuple[np.ndarray, np.ndarray] | None" = None
_common_lock = threading.Lock()


def _common_words() -> "tuple[np.ndarray, np.ndarray]":
    """The words of general text at least JARGON_ZIPF common, and those at least TYPO_OF_ZIPF
    common (what a rare word may be a mistyping of), each as sorted CRC-32s.

    From wordfreq's lists, which ship inside its wheel. Its own dictionaries would keep 30 MB a
    language; the checksums take 1.5 MB (a rare word shares one with a common word about once in
    20,000, and is then taken for a word)."""
    global _common
    if _common is not None:  # read once: every word of every question comes here
        return _common
    with _common_lock:
        if _common is None:
            import numpy as np
            from wordfreq import available_languages, cB_to_zipf, read_cBpack

            files = available_languages()
            common: list[int] = []
            typed_for: list[int] = []
            for lang in GENERAL_LANGUAGES:
                # A list's n-th bucket holds the words n centibels below a frequency of 1.
                for centibels, words in enumerate(read_cBpack(files[lang])):
                    zipf = cB_to_zipf(-centibels)
                    if zipf < JARGON_ZIPF:
                        break
                    checksums = [zlib.crc32(w.encode()) for w in words]
                    common += checksums
                    if zipf >= TYPO_OF_ZIPF:
                        typed_for += checksums
            _common = (
                np.unique(np.array(common, dtype=np.uint32)),
                np.unique(np.array(typed_for, dtype=np.uint32)),
            )
        return _common


def _held(checksums: "np.ndarray", words: "Iterable[str]") -> "np.ndarray":
    """Which of the words have their checksum among the sorted `checksums`."""
    import numpy as np

    wanted = np.fromiter((zlib.crc32(w.encode()) for w in words), dtype=np.uint32)
    at = np.minimum(np.searchsorted(checksums, wanted), len(checksums) - 1)
    return checksums[at] == wanted


_LETTERS = "abcdefghijklmnopqrstuvwxyzáàâãçéêíóôõúü"


def _one_edit(word: str) -> set[str]:
    """Every word one letter dropped, added or changed, or two neighbours swapped, away."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return {
        *(a + b[1:] for a, b in splits if b),
        *(a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1),
        *(a + c + b[1:] for a, b in splits if b for c in _LETTERS),
        *(a + c + b for a, b in splits for c in _LETTERS),
    }


def _unit(vectors: "np.ndarray") -> "np.ndarray":
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)

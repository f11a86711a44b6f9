"""Digest -> chunks: one bullet is one chunk, and the summary is one more.

Bullets are written to stand alone, so a bullet is the natural unit of recall: the search result
an agent reads is a whole fact, not a window cut mid-sentence.
"""

from dataclasses import dataclass

from librarian_dagster.core.digest import SECTIONS, Digest


@dataclass(frozen=True)
class Chunk:
    section: str
    position: int
    text: str


def chunk_digest(digest: Digest) -> list[Chunk]:
    chunks = [Chunk("summary", 0, digest.summary.strip())] if digest.summary.strip() else []
    for key, _heading in SECTIONS:
        position = 0
        for bullet in getattr(digest, key):
            text = bullet.strip()
            if text:
                chunks.append(Chunk(key, position, text))
                position += 1
    return chunks


@dataclass(frozen=True)
class ChunkVectors:
    """One vector per chunk, in the order of the chunks, and the model that made them."""

    model: str
    dimension: int
    vectors: list[list[float]]

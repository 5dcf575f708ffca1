"""Similarity of texts and vectors: cosine (numpy) and a word-overlap stand-in.

:func:`lexical_similarity` is what lessons fall back to without an embeddings endpoint:
a cosine of word counts, weaker than embeddings (no synonyms, any shared word counts).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")
# Words too common in goals to say whether two goals are alike.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
        "this",
        "that",
        "these",
        "those",
        "our",
        "your",
        "their",
        "we",
        "you",
        "please",
    ]
)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is zero or they differ in length)."""
    if len(a) != len(b) or not a:
        return 0.0
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    norm = float(np.linalg.norm(va) * np.linalg.norm(vb))
    return float(va @ vb) / norm if norm else 0.0


def cosine_many(query: Sequence[float], rows: Sequence[Sequence[float]]) -> list[float]:
    """:func:`cosine` of ``query`` with each row, in one matrix product."""
    if not rows:
        return []
    out = [0.0] * len(rows)
    same = [i for i, r in enumerate(rows) if len(r) == len(query)]
    if not same or not query:
        return out
    matrix = np.asarray([rows[i] for i in same], dtype=float)
    q = np.asarray(query, dtype=float)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(q)
    dots = matrix @ q
    for j, i in enumerate(same):
        out[i] = float(dots[j] / norms[j]) if norms[j] else 0.0
    return out


def words(text: str) -> Counter[str]:
    """The content words of ``text``, lower-cased, with their counts."""
    return Counter(w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS)


def lexical_similarity(a: str, b: str) -> float:
    """Cosine of the two texts' word counts (stop words left out): 1 for the same words."""
    wa, wb = words(a), words(b)
    dot = sum(n * wb[w] for w, n in wa.items())
    norm = math.sqrt(sum(n * n for n in wa.values())) * math.sqrt(sum(n * n for n in wb.values()))
    return dot / norm if norm else 0.0

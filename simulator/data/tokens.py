"""A deterministic lowercase word tokenizer and frequency vocabulary for token-id inputs.

Used when ``text_representation="tokens"`` (LSTM / Transformer backbones learn their own
embeddings).  Id 0 is padding, id 1 is "unknown"; known words take ids ``2 ..`` in order of
decreasing training-set frequency (ties broken alphabetically, so the vocabulary is a pure
function of the training sentences).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data.raw import FeatureSet
from simulator.errors import ConfigError

PAD_ID = 0
UNK_ID = 1
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokenize(sentence: str) -> list[str]:
    """Lowercase ``sentence`` and return its words (letters/digits, with ``'s``-style suffixes)."""
    return _WORD.findall(sentence.lower())


@dataclass(frozen=True)
class Vocabulary:
    """Known words in id order; ``words[i]`` has id ``i + 2``."""

    words: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ids", {w: i + 2 for i, w in enumerate(self.words)})

    @property
    def size(self) -> int:
        """Number of ids including padding and unknown (the embedding-table size)."""
        return len(self.words) + 2

    def encode(self, sentences: Sequence[str], max_len: int) -> NDArray[np.int64]:
        """Token ids ``(len(sentences), max_len)``: truncated to ``max_len``, padded with 0."""
        if max_len < 1:
            raise ConfigError(f"max_len must be >= 1, got {max_len}", "max_len")
        out = np.full((len(sentences), max_len), PAD_ID, dtype=np.int64)
        for row, sentence in enumerate(sentences):
            ids = [self._ids.get(w, UNK_ID) for w in tokenize(sentence)[:max_len]]
            out[row, : len(ids)] = ids
        return out


def build_vocabulary(sentences: Sequence[str], size: int) -> Vocabulary:
    """The ``size`` most frequent words of ``sentences`` (ties alphabetical)."""
    if size < 1:
        raise ConfigError(f"vocab_size must be >= 1, got {size}", "vocab_size")
    counts = Counter(w for s in sentences for w in tokenize(s))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return Vocabulary(words=tuple(w for w, _ in ranked[:size]))


@dataclass(frozen=True)
class TokenRawEncoder:
    """RawEncoder: vocabulary fitted on the training sentences, ids padded to ``max_len``."""

    max_len: int
    vocab_size: int

    def __call__(self, train: Any, test: Any, ood: Any | None, *, fit: Any = None) -> FeatureSet:
        """Encode the three splits with the vocabulary of ``fit`` (default ``train``)."""
        vocab = build_vocabulary(list(train if fit is None else fit), self.vocab_size)
        return FeatureSet(
            x_train=vocab.encode(list(train), self.max_len),
            x_test=vocab.encode(list(test), self.max_len),
            x_ood=None if ood is None else vocab.encode(list(ood), self.max_len),
            vocab_size=vocab.size,
        )

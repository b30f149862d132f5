"""Method-specific properties: registry rules, exactness of SISA/retrain, SSD's rule, LiSSA."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.unlearners import DATA, FAST, PROBE, SETTINGS

from simulator.errors import ConfigError, InputError, UnknownSampleError
from simulator.unlearners import (
    BUILTIN,
    CertifiedRemoval,
    TrainingSet,
    check_removal,
    create_unlearner,
    register_unlearner,
    registered_unlearners,
    unlearner_class,
    unregister_unlearner,
)
from simulator.unlearners.cu import lissa, project_to_ball
from simulator.unlearners.ssd import dampen


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def fit(method: str, seed: int = 5, **options: Any) -> Any:
    u = create_unlearner(method, SETTINGS, **{**FAST.get(method, {}), **options})
    u.fit(DATA, seed=seed)
    return u


# ------------------------------------------------------------------------------- registry
def test_builtins_are_the_papers_methods_in_table_order() -> None:
    assert registered_unlearners()[:8] == (
        "retrain",
        "cr",
        "sisa",
        "dpsgd",
        "ssd",
        "cu",
        "decoremoval",
        "decoremoval_extractor",
    )
    assert [cls.name for cls in BUILTIN] == list(registered_unlearners()[:9])
    assert registered_unlearners()[8] == "retrain_head"


def test_registry_refuses_duplicates_unless_forced() -> None:
    class Other(CertifiedRemoval):
        pass

    with pytest.raises(ConfigError, match="already registered"):
        register_unlearner("cr", Other)
    register_unlearner("cr", CertifiedRemoval)  # the same class again is fine
    register_unlearner("cr_copy", Other)
    try:
        register_unlearner("cr_copy", CertifiedRemoval, force=True)
        assert unlearner_class("cr_copy") is CertifiedRemoval
    finally:
        unregister_unlearner("cr_copy")
    assert "cr_copy" not in registered_unlearners()
    with pytest.raises(ConfigError):
        register_unlearner("bad name", Other)


def test_unknown_method_and_option_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown method 'sgd'.*retrain, cr"):
        create_unlearner("sgd")
    with pytest.raises(ConfigError, match=r"methods\.sisa\.shard"):
        create_unlearner("sisa", shard=3)
    with pytest.raises(ConfigError, match=r"sisa\.slices"):
        create_unlearner("sisa", slices=0)
    assert create_unlearner("sisa", slices=2).options.slices == 2


# ------------------------------------------------------------------------------ ids, data
def test_check_removal() -> None:
    active = np.array([True, True, False, True])
    np.testing.assert_array_equal(check_removal([3, 0], active), [3, 0])
    with pytest.raises(UnknownSampleError) as err:
        check_removal([2, 4, 1], active)
    assert err.value.ids == [2, 4]
    for bad in ([], [1, 1], [True], ["1"]):
        with pytest.raises(InputError):
            check_removal(bad, active)  # type: ignore[arg-type]


def test_training_set_validates_and_copies() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    ts = TrainingSet(x, np.array([0, 1, 0]), 2)
    x[0, 0] = 5.0
    assert ts.x[0, 0] == 0.0 and ts.n == 3 and not ts.tokens
    with pytest.raises(InputError):
        TrainingSet(x, np.array([0, 2, 0]), 2)
    with pytest.raises(InputError):
        TrainingSet(x, np.array([0, 1]), 2)
    with pytest.raises(InputError):
        TrainingSet(x, np.array([0, 1, 0]), 2, groups=np.array([0, -1, 0]))


# ------------------------------------------------------------------- exact unlearning
@pytest.mark.parametrize("method", ["retrain", "sisa"])
def test_exact_methods_depend_only_on_the_retained_set(method: str) -> None:
    one_by_one, together = fit(method), fit(method)
    one_by_one.remove([10])
    one_by_one.remove([33, 2])
    together.remove([2, 10, 33])
    np.testing.assert_array_equal(one_by_one.predict_proba(PROBE), together.predict_proba(PROBE))


def test_sisa_retrains_only_the_shards_that_held_a_deleted_id() -> None:
    u = fit("sisa")
    group = DATA.groups
    assert group is not None
    same_shard = np.flatnonzero(group == 1)[:3]
    out = u.remove(same_shard)
    assert out.info["shards_retrained"] == 1.0
    assert 1.0 <= out.info["stages_retrained"] <= 2.0


def test_dpsgd_removal_is_a_no_op_and_epsilon_is_reported() -> None:
    pytest.importorskip("opacus")
    u = create_unlearner("dpsgd", SETTINGS)
    report = u.fit(DATA, seed=1)
    assert 0 < report.info["epsilon"] < float("inf")
    before = u.predict_proba(PROBE)
    u.remove([0, 1, 2])
    np.testing.assert_array_equal(u.predict_proba(PROBE), before)


# ------------------------------------------------------------------------ head methods
def test_cr_and_decoremoval_share_features_and_differ_in_weights() -> None:
    cr, dr = fit("cr"), fit("decoremoval")
    np.testing.assert_array_equal(cr.head.data.features, dr.head.data.features)
    assert np.all(cr.head.data.weights == 1.0)
    w0 = dr.head.data.weights
    assert w0.std() > 0 and w0.sum() == pytest.approx(DATA.n)
    dr.remove([0, 1])
    w1 = dr.head.data.weights
    assert w1[0] == 0.0 and w1.sum() == pytest.approx(DATA.n - 2)
    assert not np.allclose(w1[2:], w0[2:])  # every retained weight was refitted
    # ... cold, on the retained rows alone: exactly a from-scratch fit on them
    refit = dr.head.data._reweigh
    keep = np.arange(2, DATA.n)
    cold = refit(keep, dr.head.data.features[keep], DATA.y[keep])
    np.testing.assert_allclose(w1[2:], cold, rtol=1e-9)


# ------------------------------------------------------------------------------- SSD
def test_ssd_dampens_only_parameters_that_matter_more_to_the_forget_set() -> None:
    layer = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[2.0, 3.0]]))
    i_d = {"weight": torch.tensor([[1.0, 1.0]])}
    i_f = {"weight": torch.tensor([[40.0, 5.0]])}  # only the first exceeds alpha * I_D = 10
    changed, total = dampen(layer, i_d, i_f, dampening=1.0, selection=10.0)
    assert (changed, total) == (1, 2)
    np.testing.assert_allclose(layer.weight.detach().numpy(), [[2.0 / 40.0, 3.0]])


# -------------------------------------------------------------------------------- CU
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6))
def test_lissa_converges_to_the_damped_inverse(seed: int, d: int) -> None:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    H = A @ A.T / d + 0.1 * np.eye(d)
    g = rng.normal(size=d)
    scale = 2.0 * float(np.linalg.eigvalsh(H).max()) + 1.0
    Ht = torch.tensor(H)
    est = lissa(lambda h: [Ht @ h[0]], [torch.tensor(g)], damping=0.01, scale=scale, depth=3000)[
        0
    ].numpy()
    exact = np.linalg.solve(H + 0.01 * np.eye(d), g)
    np.testing.assert_allclose(est, exact, rtol=1e-6, atol=1e-8)


def test_project_to_ball() -> None:
    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for p in layer.parameters():
            p.fill_(10.0)
    assert project_to_ball(layer, 4.0) == pytest.approx(4.0)
    with torch.no_grad():
        norm = torch.sqrt(sum((p * p).sum() for p in layer.parameters()))
    assert float(norm) == pytest.approx(4.0, rel=1e-6)
    assert project_to_ball(layer, 100.0) == pytest.approx(4.0, rel=1e-6)


def test_class_conditional_decoremoval_keeps_every_classs_weight_mass() -> None:
    u = fit("decoremoval", objective="class_conditional")
    y = DATA.y

    def masses(w: np.ndarray, keep: np.ndarray) -> tuple[list[float], list[int]]:
        return [float(w[keep & (y == c)].sum()) for c in range(3)], [
            int((keep & (y == c)).sum()) for c in range(3)
        ]

    got, want = masses(u.head.data.weights, np.ones(DATA.n, dtype=bool))
    np.testing.assert_allclose(got, want)
    u.remove([0, 1, 2, 3])
    keep = np.ones(DATA.n, dtype=bool)
    keep[:4] = False
    got, want = masses(u.head.data.weights, keep)
    np.testing.assert_allclose(got, want)
    report = create_unlearner("decoremoval", SETTINGS).fit(DATA, seed=5)
    shares = [report.info[f"class_mass_{c}"] for c in range(3)]
    assert sum(shares) == pytest.approx(1.0) and min(shares) > 0

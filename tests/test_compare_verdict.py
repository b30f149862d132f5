"""Paired DR - CR statistics, shifted evaluation splits and DecoRemoval's extractor mode."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from simulator.compare.harness import Measurement
from simulator.compare.verdict import (
    bottom_line,
    holm,
    holm_adjusted,
    paired,
    verdict_markdown,
    verdicts,
)
from simulator.data.natural import digits_as_mnist
from simulator.errors import ConfigError
from simulator.models import (
    BackboneConfig,
    ExtractorWithHead,
    LocalEpochs,
    build_backbone,
    local_train,
)
from simulator.scenario import parse_scenario
from simulator.unlearners import ModelConfig, TrainingSet, create_unlearner


def m(method: str, seed: int, acc: float, removed: int = 10) -> Measurement:
    return Measurement(
        method=method,
        seed=seed,
        removed=removed,
        scores={"acc_test": acc, "f1_test": acc},
        removal_seconds=0.0,
        removal_calls=1,
        retrains=0,
        mia_auc=0.5,
        fit_seconds=0.0,
    )


#: Student's t with 4 degrees of freedom in closed form, and its 97.5% point (tables).
def t4_cdf(t: float) -> float:
    return 0.5 + t * (t * t + 6) / (2 * (t * t + 4) ** 1.5)


T4_975 = 2.7764451051977987


def test_paired_t_interval_is_students_and_reads_the_verdict() -> None:
    cr = [0.80, 0.82, 0.81, 0.79, 0.83]
    dr = [0.83, 0.84, 0.85, 0.81, 0.86]
    rows = [m("cr", s, a) for s, a in enumerate(cr)] + [
        m("decoremoval", s, a) for s, a in enumerate(dr)
    ]
    got = paired(rows, "decoremoval", "cr", "acc_test", 10)
    assert got is not None and got.seeds == 5
    d = np.subtract(dr, cr)
    se = d.std(ddof=1) / math.sqrt(5)
    t = d.mean() / se  # the paired t statistic, by hand
    assert math.isclose(got.p_value, 2 * (1 - t4_cdf(abs(t))), rel_tol=1e-9)
    half = T4_975 * se
    assert math.isclose(got.low, d.mean() - half) and math.isclose(got.high, d.mean() + half)
    assert got.verdict == "DR better"
    flipped = paired(rows, "cr", "decoremoval", "acc_test", 10)
    assert flipped is not None and flipped.verdict == "DR better"  # base is DR now, CI below 0


def test_the_bootstrap_interval_is_a_seeded_percentile_interval_of_the_mean() -> None:
    """Properties of a percentile bootstrap of the mean: inside the differences' range, around
    their mean, narrower than the range, and the same for the same seeds."""
    cr = [0.80, 0.82, 0.81, 0.79, 0.83, 0.80]
    dr = [0.83, 0.84, 0.85, 0.81, 0.86, 0.79]
    rows = [m("cr", s, a) for s, a in enumerate(cr)] + [
        m("decoremoval", s, a) for s, a in enumerate(dr)
    ]
    got = paired(rows, "decoremoval", "cr", "acc_test", 10)
    assert got is not None
    d = np.subtract(dr, cr)
    assert d.min() <= got.boot_low <= d.mean() <= got.boot_high <= d.max()
    assert got.boot_high - got.boot_low < d.max() - d.min()
    again = paired(rows, "decoremoval", "cr", "acc_test", 10)
    assert again is not None and (again.boot_low, again.boot_high) == (got.boot_low, got.boot_high)


def test_no_difference_when_the_interval_holds_zero_and_pairs_by_seed() -> None:
    cr = [0.80, 0.82, 0.81]
    dr = [0.81, 0.81, 0.82]
    # CR's rows in another order: pairing is by seed, not by position
    rows = [m("cr", s, a) for s, a in reversed(list(enumerate(cr)))]
    rows += [m("decoremoval", s, a) for s, a in enumerate(dr)]
    got = paired(rows, "decoremoval", "cr", "acc_test", 10)
    assert got is not None and got.verdict == "no difference"
    assert math.isclose(got.diff, float(np.mean(np.subtract(dr, cr))))
    assert paired(rows, "decoremoval", "cr", "acc_test", 99) is None
    one = paired([rows[2], rows[3]], "decoremoval", "cr", "acc_test", 10)
    assert one is not None and one.verdict == "n/a"  # one seed decides nothing


def test_identical_differences_need_the_sign_test() -> None:
    def rows(k: int) -> list[Measurement]:
        return [m("cr", s, 0.80) for s in range(k)] + [
            m("decoremoval", s, 0.7995) for s in range(k)
        ]

    five = paired(rows(5), "decoremoval", "cr", "acc_test", 10)
    assert five is not None and five.low == five.high == pytest.approx(-0.0005)
    assert five.p_value == pytest.approx(2 * 0.5**5) and five.verdict == "no difference"
    six = paired(rows(6), "decoremoval", "cr", "acc_test", 10)
    assert six is not None and six.verdict == "CR better"


def test_verdicts_cover_every_variant_split_and_checkpoint() -> None:
    rows = [
        m(name, s, 0.8 + 0.01 * s, r)
        for name in ("cr", "decoremoval", "decoremoval_extractor", "retrain")
        for s in range(3)
        for r in (0, 10)
    ]
    got = verdicts(rows, ["retrain", "cr", "decoremoval", "decoremoval_extractor"])
    assert {(g.method, g.metric, g.removed) for g in got} == {
        (v, k, r)
        for v in ("decoremoval", "decoremoval_extractor")
        for k in ("acc_test", "f1_test")
        for r in (0, 10)
    }
    assert all(g.verdict == "no difference" and g.diff == 0 for g in got)
    table = verdict_markdown(got, removed=10)
    assert len(table) == 2 + 4 and "DR-x vs CR" in table[-1]
    assert verdicts(rows, ["retrain", "decoremoval"]) == []


def test_holm_adjusts_the_table_and_the_verdict_reads_it() -> None:
    """Holm's step-down values (checked by hand), NaN left out of the family; a test that
    is significant alone is no longer so among enough others."""
    got = holm([0.01, 0.04, float("nan"), 0.03, 0.5])
    assert got[0] == pytest.approx(0.04)  # 4 x 0.01
    assert got[3] == pytest.approx(0.09)  # 3 x 0.03
    assert got[1] == pytest.approx(0.09)  # max(0.09, 2 x 0.04)
    assert got[4] == pytest.approx(0.5) and math.isnan(got[2])
    cr = [0.80, 0.82, 0.81, 0.79, 0.83]
    dr = [0.83, 0.84, 0.85, 0.81, 0.86]
    rows = [m("cr", s, a) for s, a in enumerate(cr)] + [
        m("decoremoval", s, a) for s, a in enumerate(dr)
    ]
    one = paired(rows, "decoremoval", "cr", "acc_test", 10)
    assert one is not None and one.verdict == "DR better" and one.p_value < 0.05
    (alone,) = holm_adjusted([one])
    assert alone.p_holm == pytest.approx(one.p_value) and alone.verdict == "DR better"
    crowd = holm_adjusted([one] * 40)  # the same p among 40 tests: not familywise significant
    assert all(r.p_holm >= 0.05 and r.verdict == "no difference" for r in crowd)
    line = bottom_line(crowd)
    assert line.startswith("bottom line: no difference in 40 of 40 paired tests")
    assert "Holm" in line and "\n" not in line
    table = verdict_markdown(crowd)
    assert "p (Holm)" in table[0] and "higher is better" in table[0]


# ---------------------------------------------------------------------- evaluation splits
def test_digits_as_mnist_is_a_centred_28x28_digit() -> None:
    x, y = digits_as_mnist([3, 8])
    assert x.shape == (y.size, 784) and set(np.unique(y)) == {3, 8}
    assert x.min() >= 0 and x.max() <= 1 and x.dtype == np.float32
    frame = x.reshape(-1, 28, 28)
    assert frame[:, :4].max() == 0 and frame[:, 24:].max() == 0  # MNIST's 4-pixel margin
    with pytest.raises(Exception, match="no rows"):
        digits_as_mnist([11])


BASE = """
name: s
seed: 0
data: {source: mnist, classes: [3, 8]}
model: {backbone: mlp, feature_dim: 8, hidden: [16], rounds: 1, local_epochs: 1}
stream: {phases: [{name: a, ticks: 2, rate: 2}]}
"""


def test_shift_split_spec_checks_its_fields() -> None:
    ok = parse_scenario(
        BASE + "evaluation: {shift_splits: [{name: noise, kind: gaussian_noise, severity: 1}]}"
    )
    assert ok.evaluation.shift_splits[0].max_rows == 2000
    for bad in (
        "[{name: n, kind: gaussian_noise}]",
        "[{name: d, kind: digits, severity: 1}]",
        "[{name: test, kind: remaining}]",
        "[{name: a, kind: remaining}, {name: a, kind: digits}]",
        "[{name: Bad, kind: remaining}]",
    ):
        with pytest.raises(ConfigError):
            parse_scenario(BASE + f"evaluation: {{shift_splits: {bad}}}")


def test_shift_splits_come_from_the_runners_shift_machinery() -> None:
    from simulator.data.shift import apply_shift
    from simulator.runner.evaluation import EvalSet, shift_splits
    from simulator.runner.federation import load_dataset
    from simulator.seeds import child_seed

    sc = parse_scenario(
        BASE
        + "evaluation:\n  shift_splits:\n"
        + "    - {name: noise, kind: gaussian_noise, severity: 0.5, max_rows: 40}\n"
        + "    - {name: digits, kind: digits}\n"
        + "    - {name: remaining, kind: remaining, max_rows: 30}\n"
    )
    ds = load_dataset(sc)
    test = EvalSet(ds.x_test, ds.y_test)
    got = shift_splits(sc, ds, test)
    assert list(got) == ["noise", "digits", "remaining"]
    # noise: apply_shift on a seeded sample of the test rows, labels kept
    rng = np.random.default_rng([child_seed(0, "shift_split"), 0])
    rows = np.sort(rng.choice(ds.y_test.size, size=40, replace=False))
    ref = apply_shift(
        ds.x_test[rows], ds.y_test[rows], kind="gaussian_noise", severity=0.5, dataset=ds, rng=rng
    )
    np.testing.assert_array_equal(got["noise"].x, ref.x)
    np.testing.assert_array_equal(got["noise"].y, ds.y_test[rows])
    # digits: relabelled to the task's class indices (3 -> 0, 8 -> 1)
    assert set(np.unique(got["digits"].y)) == {0, 1} and got["digits"].x.shape[1] == 784
    # remaining: the other digits with their own labels
    assert got["remaining"].y.size == 30 and not set(np.unique(got["remaining"].y)) & {3, 8}


# ---------------------------------------------------------------------- extractor mode
def test_uniform_reweighing_is_the_plain_loss() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = rng.integers(0, 2, size=64)

    def train(reweigh):  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(1)
        model = ExtractorWithHead(
            build_backbone(
                BackboneConfig("mlp", feature_dim=4, hidden=(8,)),
                input_dim=5,
                vocab_size=None,
                max_len=None,
                generator=g,
            ),
            2,
            generator=g,
        )
        local_train(
            model,
            x,
            y,
            schedule=LocalEpochs(epochs=2, batch_size=16, lr=0.01),
            generator=torch.Generator().manual_seed(2),
            device=torch.device("cpu"),
            reweigh=reweigh,
        )
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    plain = train(None)
    ones = train(lambda epoch: np.ones(64))
    torch.testing.assert_close(plain, ones, rtol=1e-5, atol=1e-6)
    seen: list[int] = []
    skewed = train(lambda epoch: seen.append(epoch) or np.where(y == 1, 1.9, 0.1))
    assert seen == [0, 1] and not torch.allclose(plain, skewed)


def test_extractor_mode_reweighs_the_extractor_and_says_what_is_certified() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.normal(size=120) > 0).astype(np.int64)
    train = TrainingSet(x, y, 2)
    settings = ModelConfig(
        backbone=BackboneConfig("mlp", feature_dim=6, hidden=(12,)), epochs=3, rff_dim=16
    )
    head = create_unlearner("decoremoval", settings)
    extr = create_unlearner("decoremoval_extractor", settings)
    r_head, r_extr = head.fit(train, seed=0), extr.fit(train, seed=0)
    assert not np.allclose(head.predict_proba(x), extr.predict_proba(x))
    assert any("extractor mode" in n for n in r_extr.notes)
    assert not any("extractor mode" in n for n in r_head.notes)
    assert all("certificate covers the linear head only" in n for n in r_extr.notes)
    again = create_unlearner("decoremoval_extractor", settings)
    again.fit(train, seed=0)
    np.testing.assert_array_equal(again.predict_proba(x), extr.predict_proba(x))
    extr.remove([0, 1, 2])
    assert extr.retained_ids.size == 117


def test_equal_differences_up_to_rounding_are_equal() -> None:
    """Two more images right out of 357 on both seeds: the differences agree only up to their
    last bits (a spread of 8e-17), which must not read as a t statistic of 10^13."""
    from simulator.compare.verdict import Pairing, paired_values

    cr = {0: 300 / 357, 1: 305 / 357}
    dr = {0: 302 / 357, 1: 307 / 357}
    assert np.subtract([dr[0], dr[1]], [cr[0], cr[1]]).std(ddof=1) > 0

    got = paired_values(dr, cr, Pairing("decoremoval", "cr", "acc_digits", 10))
    assert got is not None and got.low == got.high
    assert got.p_value == pytest.approx(2 * 0.5**2) and got.verdict == "no difference"


def test_runs_csv_keeps_every_number_exactly(tmp_path) -> None:
    """``compare retable`` recomputes the tables from ``runs.csv``: a value rounded there could
    move a mean across the table's rounding (2.315 s shown as 2.31 instead of 2.32)."""
    import csv
    import io

    from simulator.compare.table import runs_csv

    values = [2.3149999999999995, 1 / 3, np.float64(0.1) + np.float64(0.2), 1e-17, 12345.678901234]
    rows = [
        Measurement("cr", seed, 10, {"acc_test": v}, v, 1, 0, float("nan"), v)
        for seed, v in enumerate(values)
    ]
    back = list(csv.DictReader(io.StringIO(runs_csv(rows))))
    for row, v in zip(back, values, strict=True):
        assert float(row["acc_test"]) == v and float(row["removal_seconds"]) == v
        assert float(row["fit_seconds"]) == v and row["mia_auc"] == ""
        assert int(float(row["removal_calls"])) == 1

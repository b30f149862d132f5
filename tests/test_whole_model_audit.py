"""The per-example audit of the whole model (``simulator/runner/whole_model_audit.py``).

Every draw trains the extractor again: the scores are reproducible from the seed, a draw's
models differ from another's, the two sides read what they should (the retrained side never a
removed row), rows no client holds are refused, and the release's epsilon is composed as the
scope says.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.scenarios import SMALL, scenario

from simulator.errors import InputError
from simulator.runner import whole_model_audit as audit_module
from simulator.runner.federation import load_dataset, split_clients
from simulator.runner.whole_model_audit import WholeModelAudit, whole_model_audit

PRIVATE = scenario(SMALL, "model.extractor_data=private")


def removed_rows(count: int) -> list[int]:
    ds = load_dataset(PRIVATE)
    shards, _ = split_clients(PRIVATE, ds)
    return [int(i) for i in np.sort(shards[1])[:count]]


def test_scores_are_reproducible_and_each_draw_trains_again() -> None:
    rows = removed_rows(4)
    calls: list[int] = []
    first = whole_model_audit(PRIVATE, rows, draws=2, seed=3, progress=calls.append)
    again = whole_model_audit(PRIVATE, rows, draws=2, seed=3)
    assert calls == [1, 2, 3, 4]
    assert first.unlearned.shape == first.retrained.shape == (2, 4)
    np.testing.assert_array_equal(first.unlearned, again.unlearned)
    np.testing.assert_array_equal(first.retrained, again.retrained)
    assert not np.array_equal(first.unlearned[0], first.unlearned[1])  # its own extractor
    assert first.epsilon_lower.shape == (4,) and np.all(first.epsilon_lower >= 0)
    assert first.certified_epsilon is None  # private: the extractor is not covered


def test_the_retrained_side_never_reads_a_removed_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows each side's extractor and head are trained on (the real training, observed):
    the unlearned side every client row (its head then removes R), the retrained side every
    client row but R."""
    rows = removed_rows(3)
    seen: list[tuple[set[int], int]] = []
    trained = audit_module._trained

    def recording(sc, ds, shards, public):  # type: ignore[no-untyped-def]
        model = trained(sc, ds, shards, public)
        seen.append(({int(i) for s in shards for i in s}, model.head.data.retained_count))
        return model

    monkeypatch.setattr(audit_module, "_trained", recording)
    whole_model_audit(PRIVATE, rows, draws=1, seed=0)
    ds = load_dataset(PRIVATE)
    held = {int(i) for s in split_clients(PRIVATE, ds)[0] for i in s}
    (unlearned, n_unlearned), (retrained, n_retrained) = seen
    assert unlearned == held and n_unlearned == len(held)  # R leaves its head afterwards
    assert retrained == held - set(rows) and n_retrained == len(held) - len(rows)


def test_the_forgetting_nothing_check_releases_the_models_as_trained() -> None:
    """``remove=False``: the unlearned side is every model trained on D, its head untouched
    (nothing charged but its training residual, nothing certified); the retrained side is
    the same as with the removal."""
    rows = removed_rows(3)
    kept = whole_model_audit(PRIVATE, rows, draws=1, seed=5, remove=False)
    removed = whole_model_audit(PRIVATE, rows, draws=1, seed=5)
    assert kept.retrains == 0 and kept.certified_epsilon is None
    assert kept.head_epsilon < 1e-6 < removed.head_epsilon  # the training residual alone
    np.testing.assert_array_equal(kept.retrained, removed.retrained)
    assert not np.array_equal(kept.unlearned, removed.unlearned)


def test_a_dp_extractor_is_charged_by_its_accountants() -> None:
    """``dp``: every draw trains the extractor by DP-FedAvg with fresh accountants; the release's
    epsilon is the head's plus the group charge of the removed rows."""
    pytest.importorskip("opacus")
    dp = scenario(SMALL, "model.extractor_data=dp", "model.dp.noise_multiplier=4")
    audit = whole_model_audit(dp, removed_rows(2), draws=1, seed=0)
    assert audit.extractor_epsilon is not None and audit.extractor_epsilon > 0
    assert audit.certified_epsilon == pytest.approx(
        audit.head_epsilon + 2 * audit.extractor_epsilon
    )


def test_rows_no_client_holds_are_refused() -> None:
    public = scenario(SMALL, "model.extractor_data=public", "model.public_fraction=0.1")
    ds = load_dataset(public)
    _, pool = split_clients(public, ds)
    assert pool.size
    with pytest.raises(InputError, match="clients hold"):
        whole_model_audit(public, [int(pool[0])], draws=1, seed=0)
    with pytest.raises(InputError, match="distinct"):
        whole_model_audit(PRIVATE, [*removed_rows(1)] * 2, draws=1, seed=0)


def test_the_release_epsilon_is_composed_as_the_scope_says() -> None:
    empty = np.zeros((1, 3))
    rows = np.array([1, 2, 3])

    def audit(provenance: str, extractor: float | None) -> WholeModelAudit:
        return WholeModelAudit(provenance, rows, np.zeros(3), empty, empty, 0, 0.25, extractor)

    assert dataclasses.replace(audit("public", None), removes=False).certified_epsilon is None

    assert audit("public", None).certified_epsilon == 0.25
    assert audit("dp", 0.1).certified_epsilon == pytest.approx(0.25 + 3 * 0.1)
    assert audit("private", None).certified_epsilon is None

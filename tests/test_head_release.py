"""A released head, installed again (``CertifiedHead.release``, ``install``, ``reanchor``).

A checkpoint's journal records the head released after every batch; a restart whose replay
does not reproduce it installs the recorded one and measures it where it is. The charge after
that must bound the head's exact residual on the rows held now, never fall below what was
published, and the removals after it must stay certified.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.heads import planted_problem

from simulator.errors import InputError
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, Release


def make_head(seed: int = 0, **cfg: object) -> CertifiedHead:
    X, y = planted_problem(300, 8, 3, seed=seed)
    config = HeadConfig(lam=1e-3, **cfg)  # type: ignore[arg-type]
    return CertifiedHead(LocalHeadData(X, y, 3), config, rng=np.random.default_rng(seed))


def test_a_release_round_trips_through_json_exactly() -> None:
    head = make_head()
    head.remove([3, 4, 5])
    release = head.release()
    back = Release.from_dict(json.loads(json.dumps(release.to_dict())))
    np.testing.assert_array_equal(back.W, head.W)
    np.testing.assert_array_equal(back.b, head.b)
    assert back.cumulative == head.cumulative_residual
    assert (back.model_version, back.retrains, back.removals) == (
        head.model_version, head.retrains, head.removals,
    )  # fmt: skip
    assert back.rng == release.rng


def test_a_release_of_another_shape_is_refused() -> None:
    head = make_head()
    release = head.release()
    with pytest.raises(InputError, match="released head"):
        head.install(Release(release.W[:, :2], release.b[:, :2], 0.0, 1, 0, 0, release.rng))


@pytest.mark.parametrize("accounting", ["anchored", "guo", "exact"])
def test_an_installed_head_is_charged_at_least_its_exact_residual(accounting: str) -> None:
    """Install a head released *before* some removals (what a diverged replay can leave):
    the charge after ``reanchor`` is the larger of the published charge and the exact residual
    on the rows held now, and the next removals stay certified."""
    head = make_head(accounting=accounting)
    early = head.release()  # trained on all 300 rows
    for ids in ([0, 1, 2], [10, 11], [20, 21, 22, 23]):
        head.remove(ids)
    head.install(Release(early.W, early.b, 0.0, 9, 0, 3, early.rng))
    exact = head.reanchor()
    assert exact > 0.0  # 9 rows fewer than it was trained on: not at the optimum any more
    assert head.cumulative_residual == exact == head.exact_residual()
    np.testing.assert_array_equal(head.W, early.W)
    assert head.model_version == 9
    published = exact * 2
    head.install(Release(early.W, early.b, published, 9, 0, 3, early.rng))
    head.reanchor()
    assert head.cumulative_residual == published  # never below what was published
    for ids in ([30, 31], [40], [50, 51, 52]):
        report = head.remove(ids)
        assert report.retrained or head.cumulative_residual >= head.exact_residual()

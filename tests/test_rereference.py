"""Moving the reference point after a purge (``head.rereference_after``).

A class purge moves the head far from the point ``W_ref`` where the Hessian was built; every
later removal then charges the gap ``||X'(W_ref - W)||`` and most need an exact pass. With
``rereference_after = N`` the Hessian is rebuilt at the released head once N exact passes
(anchors and correction steps) were made since the last build. The tests check that the
rebuilt Hessian is the retained rows' Hessian at the new reference point (kept so by later
downdates), that it cuts the exact passes after a purge while every charge still covers the
exact residual, and that the count survives a restore.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.heads import planted_problem

from simulator.errors import ConfigError
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, RemovalReport
from simulator.head.logistic import StatisticsRequest, objective_hessian
from simulator.head.training import statistics_in

N, D, K = 600, 12, 3


def purged_head(rereference_after: int) -> tuple[CertifiedHead, list[int]]:
    """A head after a purge of 60% of class 0 (one batch), and the ids left to remove."""
    X, y = planted_problem(N, D, K, seed=3)
    config = HeadConfig(
        lam=1e-3,
        sigma=1.0,
        epsilon=1.0,
        report_exact=False,
        rereference_after=rereference_after,
    )
    head = CertifiedHead(LocalHeadData(X, y, K), config, rng=np.random.default_rng(0))
    purge = np.flatnonzero(y == 0)
    purge = purge[: int(0.6 * len(purge))]
    report = head.remove([int(i) for i in purge])
    assert not report.retrained
    rest = np.setdiff1d(np.arange(N), purge)
    order = np.random.default_rng(1).permutation(rest)
    return head, [int(i) for i in order[:60]]


def passes(report: RemovalReport) -> int:
    """Exact passes a removal made for its charge (its anchor and correction steps)."""
    return int(report.anchored) + report.corrections


def fresh_hessians(head: CertifiedHead) -> np.ndarray:
    """The retained rows' Hessians at the head's reference point, built from scratch."""
    W_ref = np.asarray(head._W_ref)
    stats = statistics_in(head.data, StatisticsRequest(W_ref, hessian=True), head._bk)
    return np.asarray(objective_hessian(stats, lam=head.config.lam))


def test_rebuilt_hessian_is_the_one_at_the_new_reference() -> None:
    """After a rebuild, and after the removals that follow it, the solver's Hessians are the
    retained rows' Hessians at ``W_ref``, and ``W_ref`` is a head that was released."""
    head, ids = purged_head(rereference_after=2)
    released = [head.W]
    rebuilt = 0
    for i in ids[:30]:
        report = head.remove([i])
        if "reference" in report.timings:
            rebuilt += 1
            assert np.array_equal(np.asarray(head._W_ref), released[-1])
        released.append(head.W)
        assert np.allclose(np.asarray(head._solver.hessians), fresh_hessians(head), atol=1e-9)
    assert rebuilt >= 1


def test_rereference_cuts_exact_passes_after_a_purge() -> None:
    """The same removals after the same purge: fewer exact passes with the rebuilds (counted
    as passes too), and every charge covers the released head's exact residual."""
    counts = {}
    for after in (0, 2):
        head, ids = purged_head(rereference_after=after)
        total = rebuilds = 0
        for i in ids:
            report = head.remove([i])
            assert not report.retrained
            assert report.cumulative >= head.exact_residual() * (1 - 1e-9)
            total += passes(report)
            rebuilds += "reference" in report.timings
        counts[after] = (total, rebuilds)
    (without, none), (with_, rebuilds) = counts[0], counts[2]
    assert none == 0 and rebuilds >= 1
    assert without >= 40, counts  # the purge left the reference behind: most removals anchor
    assert with_ + rebuilds <= without / 2, counts


def test_pass_count_survives_a_restore() -> None:
    """A head restored mid-way rebuilds at the same removal as the one that ran on, and
    releases the same heads (the count is part of the saved state)."""
    head, ids = purged_head(rereference_after=3)
    done = 0
    while head._reference_passes in (0, 3):  # restore between two rebuilds
        head.remove([ids[done]])
        done += 1
    twin, _ = purged_head(rereference_after=3)
    twin.data.load_state_dict(head.data.state_dict())  # the rows' owner saves them
    twin.load_state_dict(head.state_dict())
    assert twin._reference_passes == head._reference_passes
    for i in ids[done : done + 30]:
        a, b = head.remove([i]), twin.remove([i])
        assert ("reference" in a.timings) == ("reference" in b.timings)
        assert a.cumulative == b.cumulative
    assert np.array_equal(head.W, twin.W)


def test_negative_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="rereference_after"):
        HeadConfig(rereference_after=-1)

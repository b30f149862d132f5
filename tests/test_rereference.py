"""Moving the reference point after a purge (``head.rereference_after``).

A class purge moves the head far from the point ``W_ref`` where the Hessian was built; every
later removal then charges the gap ``||X'(W_ref - W)||`` and most need an exact pass. With
``rereference_after = N`` the Hessians of the classes that hold most of the gap are rebuilt at
the released head once the exact passes (anchors and correction steps) made since the last
build reach ``N s / K`` for ``s`` of the K classes. The tests check that the rebuilt Hessians
are the retained rows' Hessians at the new reference point of each class (kept so by later
downdates), that only the classes that moved are rebuilt, that it cuts the exact passes after
a purge while every charge still covers the exact residual, and that the count survives a
restore.
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
    retained rows' Hessians at ``W_ref``, column by column: the rebuilt classes' reference is
    the head released before the rebuild, the others' stays where it was."""
    head, ids = purged_head(rereference_after=2)
    released = [head.W]
    rebuilt: set[int] = set()
    for i in ids[:30]:
        before = np.asarray(head._W_ref).copy()
        report = head.remove([i])
        if "rereference" in report.timings:
            W_ref = np.asarray(head._W_ref)
            moved = {c for c in range(K) if not np.array_equal(W_ref[:, c], before[:, c])}
            assert moved, "a rebuild moved no reference point"
            for c in range(K):
                expected = released[-1] if c in moved else before
                assert np.array_equal(W_ref[:, c], expected[:, c])
            rebuilt |= moved
        released.append(head.W)
        assert np.allclose(np.asarray(head._solver.hessians), fresh_hessians(head), atol=1e-9)
    assert 0 in rebuilt  # the purged class moved most


def test_only_the_classes_that_moved_are_rebuilt() -> None:
    """The rebuild asks the rows for the Hessians of the classes that hold
    ``REREFERENCE_SHARE`` of the squared gap, fewest first, and no others."""
    head, ids = purged_head(rereference_after=K)  # one pass per class rebuilt
    gaps = np.asarray(head._gram.quadratic(head._W_ref - head._W))
    order = np.argsort(-gaps)
    share = np.cumsum(gaps[order]) / gaps.sum()
    expected = tuple(sorted(int(c) for c in order[: int(np.searchsorted(share, 0.8)) + 1]))
    assert head._moved_classes() == expected and len(expected) < K
    asked: list[tuple[int, ...] | None] = []
    statistics = head.data.statistics

    def recording(request: StatisticsRequest) -> object:
        if request.hessian:
            asked.append(request.columns)
        return statistics(request)

    head.data.statistics = recording  # type: ignore[method-assign]
    head._reference_passes = len(expected)  # due for these classes, not for all
    report = head.remove([ids[0]])
    assert "rereference" in report.timings and asked == [expected]
    assert np.allclose(np.asarray(head._solver.hessians), fresh_hessians(head), atol=1e-9)


def test_a_head_at_its_reference_rebuilds_nothing() -> None:
    """No gap, no rebuild: the pass count starts again instead."""
    head, ids = purged_head(rereference_after=1)
    head._refresh()  # every class at the head
    assert head._moved_classes() == ()
    head._reference_passes = 5
    head._refresh_if_due({})
    assert head._reference_passes == 0


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
            rebuilds += "rereference" in report.timings
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
        assert ("rereference" in a.timings) == ("rereference" in b.timings)
        assert a.cumulative == b.cumulative
    assert np.array_equal(head.W, twin.W)


def test_negative_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="rereference_after"):
        HeadConfig(rereference_after=-1)

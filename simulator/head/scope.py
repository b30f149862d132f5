"""What a removal certificate covers: the head alone or the whole model, and its total epsilon.

The certified head is ``(epsilon_head, delta_head)``-certified (Guo et al., ICML 2020,
Theorem 3). Everything fitted before the head (the extractor, the RFF bandwidth, the encoder's
statistics) is covered by what the extractor's provenance (``model.extractor_data``) gives:

* ``public``: fitted only on a pool that shares no row with any client, so no deleted row ever
  reached it: the extractor's part is ``(0, 0)`` and the certificate covers the whole model
  with the head's own ``(epsilon, delta)`` (scope ``whole_model``);
* ``private``: fitted on the clients' rows with no guarantee at all: the extractor's part is
  unbounded, the certificate covers the head only (scope ``head``) and there is no total;
* ``dp`` (DP-FedAvg with DP-SGD on every client, :mod:`simulator.models.dp_fedavg`): the
  accountants' per-row ``(epsilon_x, delta_x)`` over all rounds (the max over clients),
  passed as an :class:`ExtractorGuarantee`.

The total is the basic composition of the two mechanisms (Dwork & Roth 2014, Theorem 3.16)
with the extractor's part taken over the request's ``k`` rows by group privacy (their
Theorem 2.2 for pure DP; for ``(epsilon, delta)``-DP the group of ``k`` rows has
``(k epsilon, k e^((k-1) epsilon) delta)``)::

    epsilon_total = epsilon_head + k * epsilon_x
    delta_total   = delta_head   + k * exp((k - 1) * epsilon_x) * delta_x

``k`` is every row removed since the extractor was trained, not only the request's: the
released model is compared with one trained from scratch without all of them. When
``delta_total`` reaches 1 the bound says nothing and only the head is certified (scope
``head``). Whenever the whole model is not covered, :class:`CertificateScope` says why in one
line and names the setting that would cover it (``reason``; :data:`COVERING_SETTING`), and
:func:`scope_line` is the one line every output shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from simulator.errors import InputError

#: What the certificate covers.
Scope = Literal["head", "whole_model"]
#: Every scope, in report order.
SCOPES: tuple[Scope, ...] = ("head", "whole_model")
#: Every extractor provenance a certificate may name (``dp``: a DP-SGD-trained extractor).
PROVENANCES: tuple[str, ...] = ("private", "public", "dp")


@dataclass(frozen=True)
class ExtractorGuarantee:
    """The extractor's own ``(epsilon, delta)`` per row; ``epsilon`` None: no guarantee."""

    epsilon: float | None
    delta: float = 0.0


#: The extractor never read a client's row (``extractor_data: public``).
PUBLIC = ExtractorGuarantee(0.0, 0.0)
#: The extractor was trained on the clients' rows without a guarantee (``private``).
UNBOUNDED = ExtractorGuarantee(None)


#: Why the whole model is not covered (``CertificateScope.uncovered``): ``none`` (it is),
#: ``private_extractor`` (no guarantee for the extractor), ``dp_group_vacuous`` (a DP
#: extractor's group bound over the rows removed since it was trained says nothing).
UNCOVERED: tuple[str, ...] = ("none", "private_extractor", "dp_group_vacuous")
#: The setting that would cover the whole model, for each reason it is not covered.
COVERING_SETTING = {
    "private_extractor": "model.extractor_data: public or dp would cover it",
    "dp_group_vacuous": "model.dp.extractor_epsilon_limit would cover it (the whole model is "
    "retrained before the bound fails)",
}


@dataclass(frozen=True)
class CertificateScope:
    """The scope of a certificate and the whole model's ``(epsilon, delta)`` (None: head only).

    Attributes
    ----------
    scope : ``head`` (only the head is certified) or ``whole_model``.
    extractor_data : the extractor's provenance (``private``, ``public``, ``dp``).
    total_epsilon, total_delta : the composed guarantee of the whole model (module docstring);
        None when the extractor has no guarantee.
    uncovered : why the whole model is not covered, one of :data:`UNCOVERED` (``none`` under
        scope ``whole_model``).
    reason : the same in words, with the setting that would cover it (None when covered).
    """

    scope: Scope
    extractor_data: str
    total_epsilon: float | None
    total_delta: float | None
    uncovered: str = "none"
    reason: str | None = None

    def line(self) -> str:
        """The scope in one line, as every output shows it (:func:`scope_line`)."""
        return scope_line(
            self.scope, self.extractor_data, self.total_epsilon, self.total_delta, self.reason
        )


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def scope_line(
    scope: str,
    extractor_data: str,
    total_epsilon: float | None,
    total_delta: float | None,
    reason: str | None,
) -> str:
    """``scope: whole_model (...): total epsilon ..., delta ...`` or ``scope: head (...): ...``.

    The one rendering of a scope that the run's console, ``summary.md`` and ``compare runs``
    show (receipts, events and metrics carry its fields: ``scope``, ``extractor_data``,
    ``total_epsilon_spent``, ``total_delta``, ``scope_reason``).
    """
    if scope == "whole_model":
        return (
            f"scope: whole_model (extractor_data {extractor_data}): total epsilon spent "
            f"{_num(total_epsilon)}, delta {_num(total_delta)}"
        )
    why = reason or "the extractor has no guarantee"
    return (
        f"scope: head (extractor_data {extractor_data}): the whole model is not covered, no "
        f"total epsilon: {why}"
    )


def max_group(extractor: ExtractorGuarantee, head_delta: float) -> int | None:
    """The most rows whose group bound is not vacuous (None: any number; 0: not even one).

    The largest ``k`` with ``head_delta + k e^((k-1) epsilon_x) delta_x < 1`` (increasing in
    ``k``: found by doubling, then bisection).
    """
    if extractor.epsilon is None:
        return 0
    if not extractor.delta:
        return None

    def fits(k: int) -> bool:
        return compose(0.0, head_delta, extractor, rows=k) is not None

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, 2 * high
        if high > 2**40:  # an extractor this private covers any group we will meet
            return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _reason(uncovered: str, rows: int, most: int | None) -> str:
    """Why the whole model is not covered, and the setting that would cover it (one line)."""
    if uncovered == "private_extractor":
        why = "the extractor was trained on the clients' rows with no guarantee"
    else:
        why = (
            f"the DP-SGD extractor's group bound is vacuous for the {rows} rows removed since it "
            f"was trained (it covers at most {most})"
        )
    return f"{why}; {COVERING_SETTING[uncovered]}"


def extractor_guarantee(extractor_data: str) -> ExtractorGuarantee:
    """The extractor's part of a provenance with a fixed one (``public``: 0; ``private``: none).

    Raises
    ------
    InputError
        Any other provenance: a ``dp`` extractor's part is computed by its accountant and
        passed to :func:`certificate_scope` as ``extractor``.
    """
    if extractor_data == "public":
        return PUBLIC
    if extractor_data == "private":
        return UNBOUNDED
    raise InputError(
        f"extractor_data {extractor_data!r} has no fixed guarantee: pass the accountant's"
    )


def compose(
    head_epsilon: float, head_delta: float, extractor: ExtractorGuarantee, *, rows: int = 1
) -> tuple[float, float] | None:
    """``(epsilon_total, delta_total)`` of the head and the extractor over ``rows`` rows.

    The module docstring's composition; None when the extractor has no guarantee, or when
    the group's ``delta_total`` reaches 1 (``k`` too large for the extractor's ``delta_x``:
    the bound is vacuous, so only the head is certified for that request). ``rows`` 0: no
    row the extractor read was removed (it was retrained since), the head's own guarantee.
    """
    if rows < 0:
        raise InputError(f"a group has at least zero rows, got {rows}")
    if extractor.epsilon is None:
        return None
    if rows == 0:
        return head_epsilon, head_delta
    eps_x, delta_x = float(extractor.epsilon), float(extractor.delta)
    group_delta = 0.0
    if delta_x:
        log_group = math.log(rows) + (rows - 1) * eps_x + math.log(delta_x)
        group_delta = math.exp(log_group) if log_group < 0 else math.inf
    total_delta = head_delta + group_delta
    if total_delta >= 1:
        return None  # k e^((k-1) eps_x) delta_x >= 1: the group bound says nothing
    return head_epsilon + rows * eps_x, total_delta


def certificate_scope(
    extractor_data: str,
    head_epsilon: float,
    head_delta: float,
    *,
    rows: int = 1,
    extractor: ExtractorGuarantee | None = None,
) -> CertificateScope:
    """What a head certificate ``(head_epsilon, head_delta)`` covers under ``extractor_data``.

    ``extractor`` overrides the provenance's fixed part (:func:`extractor_guarantee`): the hook
    through which a DP-trained extractor's accounted epsilon enters the total.
    """
    part = extractor if extractor is not None else extractor_guarantee(extractor_data)
    total = compose(head_epsilon, head_delta, part, rows=rows)
    if total is None:
        uncovered = "private_extractor" if part.epsilon is None else "dp_group_vacuous"
        most = max_group(part, head_delta) if uncovered == "dp_group_vacuous" else 0
        reason = _reason(uncovered, rows, most)
        return CertificateScope("head", extractor_data, None, None, uncovered, reason)
    return CertificateScope("whole_model", extractor_data, total[0], total[1])

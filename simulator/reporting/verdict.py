"""The certificate verdict and the per-phase table at the top of every run's summary.

:func:`certificate_verdict` reads the deletion-batch events and the end event and says, first,
whether the guarantee **held**: the accounting's charge since the last retrain never above the
budget (every batch's ``cumulative_residual`` against its ``budget``), and the released head's
exact residual against a retrain from scratch within the budget at every reference checkpoint
where it was measured (``residual_against_cold_fit``). Then under which accounting, the largest
single charge and what caused it (batch, phase, the withdrawal of client c or the requests and
samples of the batch), the retrains by reason, the head's guarantee ``(epsilon, delta)``, and
the certificate's scope (:func:`scope_line`: ``whole_model`` with the whole model's total
epsilon, or ``head`` with why the whole model is not covered and the setting that would cover
it), one line rendered by :func:`simulator.head.scope.scope_line` from the event's fields.

:func:`phase_table` is one row per stream phase: batches, requests, samples removed, the peak
budget used (the largest charge of the released head over the phase, as a share of the budget:
never a sum, which would read as over the budget when exact passes or retrains reset the
charge), the certified updates, the exact passes (``anchored`` accounting: the charge reset to
the measured residual), the retrains and the test accuracy at the end of the phase.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.head.config import ACCOUNTING_NOTES
from simulator.head.scope import ExtractorGuarantee, max_group
from simulator.head.scope import scope_line as render_scope

#: Relative slack when comparing a charge with the budget (floating-point sums).
SLACK = 1e-9


@dataclass(frozen=True)
class Table:
    """A titled table of a summary (Markdown and console)."""

    title: str
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]] = ()

    def markdown(self) -> str:
        """The table under a ``##`` heading."""
        lines = [f"## {self.title}", "", "| " + " | ".join(self.header) + " |"]
        lines.append("|" + "---|" * len(self.header))
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Verdict:
    """Whether the certificate held, and the lines that explain it."""

    held: bool
    headline: str
    lines: list[str]

    def markdown(self) -> str:
        """``## <headline>`` and one bullet per line."""
        return f"## {self.headline}\n\n" + "".join(f"- {x}\n" for x in self.lines)


def _pct(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.3g} times" if v >= 10 else f"{100 * v:.1f}%"


def _share(v: float) -> str:
    """``96.0% of the budget`` or ``1.84e+03 times the budget``."""
    text = _pct(v)
    return f"{text} the budget" if text.endswith("times") else f"{text} of the budget"


def cause(batch: dict[str, Any]) -> str:
    """What a batch removed: the withdrawal of client c, or its requests and samples."""
    where = f"batch {batch.get('batch', '?')} (phase {batch.get('phase', '?')!r})"
    withdrawn = batch.get("withdrawn_clients") or []
    if withdrawn:
        who = ", ".join(str(c) for c in withdrawn)
        what = f"withdrawal of client{'s' if len(withdrawn) > 1 else ''} {who}"
    else:
        what = f"{batch.get('applied', batch.get('requests', 0))} deletion request(s)"
    return f"{where}: {what}, {batch.get('samples', 0)} samples"


def _charged(b: dict[str, Any]) -> float | None:
    """The charge a batch kept (none for a retrained batch: the retrain reset the charge)."""
    v = b.get("charged")
    if b.get("retrained") or not isinstance(v, int | float) or not b.get("samples"):
        return None
    return float(v)


def scope_line(end: dict[str, Any]) -> str:
    """The verdict's scope line, from an event's scope fields.

    Rendered by :func:`simulator.head.scope.scope_line`: what the certificate covers, the
    whole model's total under ``whole_model``, and under ``head`` why the whole model is not
    covered and which setting would cover it.
    """
    scope = end.get("scope") or ("whole_model" if end.get("extractor_certified") else "head")
    provenance = end.get("extractor_data") or ("public" if scope == "whole_model" else "private")
    return render_scope(
        str(scope),
        str(provenance),
        _float(end.get("total_epsilon_spent")),
        _float(end.get("total_delta")),
        end.get("scope_reason"),
    )


def scope_cell(end: dict[str, Any]) -> str:
    """The summary table's short scope: ``whole_model, total epsilon ...`` or ``head only``.

    The reason the whole model is not covered is in the verdict's scope line above the table.
    """
    line = scope_line(end)
    if line.startswith("scope: whole_model"):
        total, delta = _float(end.get("total_epsilon_spent")), _float(end.get("total_delta"))
        eps = "n/a" if total is None else f"{total:.4g}"
        return f"whole_model: total epsilon {eps}, delta {'n/a' if delta is None else f'{delta:g}'}"
    return "head only (whole model: see the scope line)"


def head_guarantee(end: dict[str, Any], *, short: bool = False) -> str:
    """The guarantee's target ``(epsilon, delta)`` and what it covers, as the scope says.

    Under scope ``head``: the linear head only; ``whole_model`` with a public extractor: the
    whole model (the extractor's part is 0); with a DP extractor: the head, composed with
    the extractor's group part into the whole model's total (the scope line).
    """
    eps, delta = end.get("epsilon_target"), end.get("delta")
    pair = f"({eps}, {delta:g})" if isinstance(delta, int | float) else f"epsilon {eps}"
    whole = scope_line(end).startswith("scope: whole_model")
    dp = end.get("extractor_data") == "dp"
    if short:
        covers = ("head + DP extractor" if dp else "whole model") if whole else "linear head only"
        return f"{pair}, {covers}"
    if not whole:
        return f"{pair}-certified removal of the linear head only (one Gaussian b over its columns)"
    if dp:
        return (
            f"{pair}-certified removal of the head, composed with the DP-SGD extractor's group "
            "part into the whole model's total (the scope line)"
        )
    return f"{pair}-certified removal of the whole model (the extractor never read a client's row)"


def extractor_guarantee_text(end: dict[str, Any]) -> str:
    """What the extractor itself guarantees: nothing, nothing needed, or DP-SGD's per row."""
    data = end.get("extractor_data") or ("public" if end.get("extractor_certified") else "private")
    if data == "public":
        return "none needed (public data only)"
    if data != "dp":
        return "none (trained on clients' rows)"
    eps, delta = _float(end.get("extractor_epsilon")), _float(end.get("extractor_delta"))
    if eps is None or delta is None:
        return "DP-SGD (epsilon not recorded)"
    most = max_group(ExtractorGuarantee(eps, delta), float(end.get("delta") or 0.0))
    group = "any group" if most is None else f"groups of <= {most} rows"
    return f"DP-SGD ({eps:.4g}, {delta:g}) per row; {group}"


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def certificate_verdict(
    start: dict[str, Any], batches: list[dict[str, Any]], end: dict[str, Any]
) -> Verdict:
    """The verdict (module docstring)."""
    accounting = str(end.get("accounting", start.get("accounting", "?")))
    scope = scope_line(end)
    removing = [b for b in batches if b.get("samples")]
    reasons = Counter(str(b.get("retrain_reason")) for b in removing if b.get("retrained"))
    if removing and reasons.get("method", 0) == len(removing):
        lines = [
            f"every batch retrained the head from scratch ({end.get('method')}): exact "
            f"unlearning of the head, no certified step to charge ({len(removing)} retrains)",
            scope,
        ]
        return Verdict(True, "Certificate: exact (head retrained per batch)", lines)

    over = [
        b
        for b in batches
        if isinstance(b.get("cumulative_residual"), int | float)
        and isinstance(b.get("budget"), int | float)
        and b["cumulative_residual"] > b["budget"] * (1 + SLACK)
    ]
    refs = [c for b in batches for c in b.get("checkpoints", [])]
    checked = [c for c in refs if isinstance(c.get("residual_against_cold_fit"), int | float)]
    exceeded = [c for c in checked if c["residual_against_cold_fit"] > c["budget"] * (1 + SLACK)]
    held = not over and not exceeded
    headline = "Certificate: HELD" if held else "Certificate: NOT HELD"
    lines = [
        f"guarantee: {head_guarantee(end)}",
        scope,
        f"accounting: {accounting} ({ACCOUNTING_NOTES.get(accounting, '?')})",
        _budget_line(batches, over),
        _reference_line(checked, exceeded),
        *_largest_charges(batches, removing),
    ]
    by = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
    lines.append(f"retrains: {sum(reasons.values())} ({by})" if reasons else "retrains: none")
    if end.get("interrupted"):
        lines.append(f"covers the {len(batches)} batch(es) applied before the interrupt")
    return Verdict(held, headline, lines)


def _budget_line(batches: list[dict[str, Any]], over: list[dict[str, Any]]) -> str:
    """Whether the charge stayed within the budget: its peak, or the batches above it."""
    if over:
        worst = max(over, key=lambda b: b["cumulative_residual"] / b["budget"])
        return (
            f"charge ABOVE the budget in {len(over)} batch(es); worst "
            f"{_pct(worst['cumulative_residual'] / worst['budget'])} at {cause(worst)}"
        )
    used = [
        b["cumulative_residual"] / b["budget"]
        for b in batches
        if isinstance(b.get("cumulative_residual"), int | float) and b.get("budget")
    ]
    peak = _pct(max(used)) if used else "n/a"
    return f"charge never above the budget (peak {peak} of it between retrains)"


def _reference_line(checked: list[dict[str, Any]], exceeded: list[dict[str, Any]]) -> str:
    """The exact residual against a retrain from scratch at the reference checkpoints."""
    if not checked:
        return "exact residual vs a retrain from scratch: not measured (no checkpoint)"
    worst = max(checked, key=lambda c: c["residual_against_cold_fit"] / c["budget"])
    state = "EXCEEDED at " + str(len(exceeded)) if exceeded else "within the budget at all"
    return (
        f"exact residual vs a retrain from scratch: {state} {len(checked)} reference "
        f"checkpoint(s) (max {worst['residual_against_cold_fit']:.3g} of budget "
        f"{worst['budget']:.3g}, at {worst.get('checkpoint')} removals)"
    )


def _largest_charges(batches: list[dict[str, Any]], removing: list[dict[str, Any]]) -> list[str]:
    """The largest single charge kept, and the largest that forced a retrain (if any)."""
    charges = [(c, b) for b in batches if (c := _charged(b)) is not None]
    if charges:
        top, top_batch = max(charges, key=lambda cb: cb[0] / cb[1]["budget"])
        lines = [
            f"largest single charge: {top:.3g} = {_share(top / top_batch['budget'])}, "
            f"{cause(top_batch)}"
        ]
    else:
        lines = ["largest single charge: none kept (every removing batch retrained)"]
    forced = [
        b
        for b in removing
        if b.get("retrained")
        and b.get("retrain_reason") == "budget"
        and isinstance(b.get("charged"), int | float)
        and b.get("budget")
    ]
    if forced:
        b = max(forced, key=lambda b: float(b["charged"]) / b["budget"])
        lines.append(
            f"largest charge that forced a retrain: {float(b['charged']):.3g} = "
            f"{_share(float(b['charged']) / b['budget'])}, {cause(b)}"
        )
    return lines


def exact_pass(batch: dict[str, Any]) -> bool:
    """The batch made an exact pass (``anchored``: the charge reset to the measured residual)."""
    return bool(batch.get("anchored")) and not batch.get("retrained")


def phase_table(batches: list[dict[str, Any]]) -> Table:
    """One row per phase, in stream order (module docstring)."""
    order: list[str] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for b in batches:
        name = str(b.get("phase", "?"))
        if name not in groups:
            order.append(name)
            groups[name] = []
        groups[name].append(b)
    rows = []
    for name in order:
        group = groups[name]
        removing = [b for b in group if b.get("samples")]
        used = [
            float(b["budget_used_ratio"])
            for b in group
            if isinstance(b.get("budget_used_ratio"), int | float)
        ]
        acc = [
            b["metrics"]["accuracy_test"]
            for b in group
            if isinstance(b.get("metrics", {}).get("accuracy_test"), int | float)
        ]
        rows.append(
            (
                name,
                str(len(group)),
                str(sum(int(b.get("requests", 0)) for b in group)),
                str(sum(int(b.get("samples", 0)) for b in group)),
                _pct(max(used)) if used else "n/a",
                str(sum(not b.get("retrained") for b in removing)),
                str(sum(exact_pass(b) for b in removing)),
                str(sum(bool(b.get("retrained")) for b in removing)),
                f"{100 * acc[-1]:.2f}%" if acc else "n/a",
            )
        )
    return Table("Phases", PHASE_HEADER, rows)


#: The phase table's columns (short, so that the table fits a narrow console).
PHASE_HEADER = (
    "phase",
    "batches",
    "requests",
    "samples",
    "peak budget",
    "certified",
    "exact passes",
    "retrains",
    "test acc. (end)",
)

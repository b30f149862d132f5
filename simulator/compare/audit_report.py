"""The audit's outputs: ``audit.json`` (every score and verdict) and its Markdown section.

``audit.json`` holds every :class:`~simulator.compare.audit.AuditScore` (so the tables can be
rewritten from it, :func:`load_audit_scores`) and, per method, the mean and standard deviation
over seeds of every model's AUC and accuracy and each attack's verdict
(:mod:`simulator.compare.leak`). :func:`audit_markdown` is the section ``table.md`` ends with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from simulator.compare.audit import ATTACKS, MODEL_LABELS, MODELS, AuditScore
from simulator.compare.leak import EXTRACTOR_ATTACKS, FACTOR, MethodAudit, audit_methods
from simulator.compare.table import Stat
from simulator.errors import ConfigError

#: The audit's file in a comparison folder.
AUDIT_FILE = "audit.json"
#: The rule, as the outputs state it.
RULE = (
    f"tolerance = {FACTOR:g} x the retrained model's (a) AUC standard deviation over seeds "
    "(at least the AUC's own sampling standard deviation when nothing leaks); the extractor "
    "leaks when mean(b) - mean(a) exceeds it, the head when mean(c) - mean(b) does; a part "
    "leaks when one attack says so (LiRA, whose references share the attacked extractor, "
    "votes on the head only)"
)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _stat(values: Sequence[float]) -> dict[str, Any]:
    s = Stat.of(values)
    return {"mean": _finite(s.mean), "std": _finite(s.std), "values": [_finite(v) for v in values]}


def _method_json(audit: MethodAudit) -> dict[str, Any]:
    return {
        "method": audit.method,
        "seeds": list(audit.seeds),
        "removed": list(audit.removed),
        "answer": audit.answer,
        "auc": {m: {a: _stat(audit.auc[(m, a)]) for a in ATTACKS} for m in MODELS},
        "acc_test": {m: _stat(audit.acc_test[m]) for m in MODELS},
        "verdicts": {
            a: {
                "where": v.where,
                "extractor_gap": _finite(v.extractor_gap),
                "head_gap": _finite(v.head_gap),
                "tolerance": _finite(v.tolerance),
                "seeds": v.seeds,
            }
            for a, v in audit.verdicts.items()
        },
    }


def audit_json(
    scenario: str,
    scores: Sequence[AuditScore],
    skipped: Sequence[str] = (),
    *,
    extractor: dict[str, Any] | None = None,
) -> str:
    """The text of ``audit.json`` (NaN written as null).

    ``extractor``: the provenance, scope and accounted epsilon of the extractors
    (:func:`simulator.compare.provenance.record`).
    """
    scores_out = [
        {
            **asdict(s),
            "auc": {a: _finite(v) for a, v in s.auc.items()},
            "seconds": _finite(s.seconds),
        }
        for s in scores
    ]
    body = {
        "scenario": scenario,
        "models": MODEL_LABELS,
        "attacks": list(ATTACKS),
        "rule": RULE,
        "factor": FACTOR,
        "skipped_methods": list(skipped),
        "extractor": extractor,
        "methods": [_method_json(a) for a in audit_methods(scores)],
        "scores": scores_out,
    }
    return json.dumps(body, indent=2) + "\n"


def load_audit_scores(path: Path) -> tuple[list[AuditScore], list[str]]:
    """The scores and skipped methods of an ``audit.json`` written by :func:`audit_json`.

    Raises
    ------
    ConfigError
        The file is not such an ``audit.json``.
    """
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        scores = [
            AuditScore(
                method=str(s["method"]),
                seed=int(s["seed"]),
                model=str(s["model"]),
                removed=int(s["removed"]),
                auc={a: math.nan if v is None else float(v) for a, v in s["auc"].items()},
                acc_test=float(s["acc_test"]),
                members=int(s["members"]),
                nonmembers=int(s["nonmembers"]),
                seconds=math.nan if s.get("seconds") is None else float(s["seconds"]),
            )
            for s in body["scores"]
        ]
        return scores, [str(m) for m in body.get("skipped_methods", [])]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"not an audit written by unlearnsim compare: {exc}", str(path)) from exc


#: The heading and introduction of the comparison's section.
HEADING = "## Where does it leak? (membership audit at the final removed set)"
INTRO = (
    "Membership AUC, removed rows vs the test split, mean ± std over seeds, of (a) the "
    "model retrained from scratch with its extractor (the retrain baseline's extractor, "
    "the method's head objective), (b) the method's extractor with the head retrained "
    "from scratch on the retained rows, (c) the unlearned model."
)


def audit_markdown(
    scores: Sequence[AuditScore],
    skipped: Sequence[str] = (),
    *,
    heading: str = HEADING,
    intro: str = INTRO,
) -> str:
    """The ``table.md`` section: every model's AUCs, the gaps and the answer per method.

    ``heading`` and ``intro``: the section's title and first paragraph (``run --audit``
    names its checkpoint and describes its own models; the rule follows the intro).
    """
    audits = audit_methods(scores)
    lines = [
        heading,
        "",
        intro + " Rule: " + RULE + ".",
        "",
        "| method | removed | model | test acc (%) | " + " | ".join(ATTACKS) + " |",
        "|---|---|---|---|" + "---|" * len(ATTACKS),
    ]
    for audit in audits:
        removed = ", ".join(str(r) for r in sorted(set(audit.removed)))
        for model in MODELS:
            aucs = [Stat.of(audit.auc[(model, a)]).text(3) for a in ATTACKS]
            acc = Stat.of(audit.acc_test[model]).text(1, 100.0)
            row = [audit.method, removed, MODEL_LABELS[model], acc, *aucs]
            lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "| method | seeds | attack | extractor: b - a | head: c - b | tolerance | says |",
        "|---|---|---|---|---|---|---|",
    ]
    for audit in audits:
        for attack, v in audit.verdicts.items():
            extractor = f"{v.extractor_gap:+.3f}" if math.isfinite(v.extractor_gap) else "n/a"
            if attack not in EXTRACTOR_ATTACKS:
                extractor += " (no vote)"
            head = f"{v.head_gap:+.3f}" if math.isfinite(v.head_gap) else "n/a"
            tol = f"{v.tolerance:.3f}" if math.isfinite(v.tolerance) else "n/a"
            row = [audit.method, str(v.seeds), attack, extractor, head, tol, v.where]
            lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for audit in audits:
        lines.append(f"* **{audit.method}: membership leaks through {_said(audit.answer)}**")
    seconds = Stat.of(s.seconds for s in scores if s.model == MODELS[0])
    lines.append(f"* audit time per method and seed: {seconds.text(1)} s (wall clock)")
    if skipped:
        lines.append(
            f"* not audited (no separate certified head): {', '.join(sorted(set(skipped)))}"
        )
    return "\n".join(lines) + "\n"


def _said(answer: str) -> str:
    if answer == "neither":
        return "neither the head nor the extractor"
    if answer == "undetermined":
        return "? (undetermined: fewer than two seeds)"
    return "the " + answer

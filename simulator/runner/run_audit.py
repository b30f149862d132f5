"""Where does it leak? The membership audit of ``unlearnsim run --audit`` at reference checkpoints.

With ``evaluation.audit: true``, every reference checkpoint (``evaluation.checkpoints``) scores
three models at the current retained rows ``D'`` and attacks them alike, with the machinery
``unlearnsim compare run --audit`` uses (:mod:`simulator.metrics.membership_audit`):

* ``retrained`` (a): the extractor and RFF map trained from scratch on ``D'`` by the
  federation's own procedure for its provenance (``model.extractor_data``): ``private``,
  FedAvg on every client's retained rows (the RFF bandwidth on them, as at the build);
  ``dp``, DP-FedAvg on the retained pools with fresh accountants
  (:func:`~simulator.runner.extractor_refit.train_dp_generation`, the current extractor
  generation's seed); ``public``, the run's own extractor, which never read a client row (said
  in the output, not retrained). Its head: every client's weights fitted cold on its retained
  rows on these features (uniform for ``cr``), the run's perturbation ``b``, trained to the
  exact minimiser (:func:`~simulator.runner.scoring.retrain_objective`);
* ``same_extractor`` (b): the run's extractor, the head trained the same way on ``D'``: the
  reference ``A(D')`` the checkpoint already compares the released head with;
* ``unlearned`` (c): the released head.

Members are the rows removed by request so far (``run.forgotten``), non-members the test
split, at most ``evaluation.max_samples`` of each; LiRA has ``evaluation.lira_references``
reference heads per extractor. The extractor's retrain reuses the scenario's seeds (a rerun of
the build on ``D'``); the audit's own draws (attacked rows, reference halves) come from
``child_rng(seed, "audit", ...)``. One run is one seed, so :mod:`simulator.compare.leak`'s
rule, which needs the spread of (a) over seeds, gives no answer here (``undetermined``): the
section reports the gaps ``b - a`` (extractor) and ``c - b`` (head) per attack; ``run --seeds
N --audit`` gives one audit per seed, each in its own run folder.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.arrays import FloatArray, IntArray
from simulator.compare.audit_report import audit_json, audit_markdown
from simulator.compare.leak import audit_methods
from simulator.head import train_head
from simulator.metrics.membership_audit import (
    ATTACKS,
    MODEL_LABELS,
    MODELS,
    AuditConfig,
    AuditScore,
    ExtractorView,
    audit_data,
    extractor_view,
    score_models,
)
from simulator.models.device import resolve_device
from simulator.models.featurizer import Featurizer
from simulator.runner.extractor_refit import retained_pools, train_dp_generation
from simulator.runner.featurize import in_process_round, train_featurizer
from simulator.runner.federation import Federation
from simulator.runner.scoring import retrain_objective
from simulator.seeds import child_rng

#: The run folder's audit files.
AUDIT_JSON = "audit.json"
AUDIT_MD = "audit.md"
#: Why one run gives no leak answer.
ONE_SEED = (
    "one run is one seed: the leak rule compares the gaps with the spread of (a) over seeds, "
    "so a single run's answer is undetermined (run --seeds N --audit audits every seed, "
    "each in its own folder; compare --audit gives the answer over seeds)"
)


@dataclass(frozen=True, eq=False)
class RetrainedExtractor:
    """Model (a)'s extractor: its train and test features, and how it was obtained."""

    train: FloatArray
    test: FloatArray
    provenance: str
    retrained: bool
    seconds: float
    note: str


def retrained_extractor(fed: Federation) -> RetrainedExtractor:
    """The extractor trained from scratch on ``D'`` by the provenance's procedure (module doc)."""
    sc, ds = fed.scenario, fed.dataset
    provenance = sc.model.extractor_data
    t = time.perf_counter()
    if provenance == "public":
        return RetrainedExtractor(
            fed.train_features,
            fed.featurizer(ds.x_test),
            provenance,
            retrained=False,
            seconds=0.0,
            note="public extractor: it never read a client row, so (a) keeps the run's own",
        )
    trained_on = {cid: client.retained_ids for cid, client in fed.clients.items()}
    pools = retained_pools(ds, trained_on, len(fed.client_indices))
    device = resolve_device(sc.device)
    featurizer: Featurizer
    if provenance == "dp":
        generation = fed.extractor.generation
        featurizer, _ = train_dp_generation(sc, ds, pools, generation=generation, device=device)
        note = f"DP-FedAvg on the retained rows, fresh accountants (generation {generation})"
    else:
        local_round = in_process_round(sc, ds, pools, device=device)
        pool = np.concatenate([x for x, _ in pools])  # the bandwidth's rows, as at the build
        featurizer = train_featurizer(sc, ds, pool, local_round=local_round, device=device)
        note = "FedAvg on every client's retained rows, RFF bandwidth on them"
    return RetrainedExtractor(
        featurizer(ds.x_train),
        featurizer(ds.x_test),
        provenance,
        retrained=True,
        seconds=time.perf_counter() - t,
        note=note,
    )


def head_on(fed: Federation, features: FloatArray) -> FloatArray:
    """The head trained from scratch on ``D'`` of ``features`` (cold weights, the run's ``b``)."""
    cfg = fed.head.config
    data = retrain_objective(fed, features).data
    W: FloatArray = np.asarray(train_head(data, fed.head.b, lam=cfg.lam, tol=cfg.tol).W)
    return W


def audit_checkpoint(fed: Federation, forgotten: Sequence[int], checkpoint: int) -> dict[str, Any]:
    """The ``audit`` section of a checkpoint's entry (module docstring).

    Keys: ``removed``, ``members``, ``nonmembers``, ``seconds``, ``extractor`` (provenance,
    whether (a)'s extractor was retrained, how, seconds), ``models`` (per model: label, AUC per
    attack, test accuracy), ``gaps`` (per attack: ``extractor`` = b - a, ``head`` = c - b),
    ``leak`` and ``leak_note``.
    """
    started = time.perf_counter()
    sc, ds = fed.scenario, fed.dataset
    cfg = sc.evaluation
    config = AuditConfig(references=cfg.lira_references, max_samples=cfg.max_samples)
    rows = np.sort(fed.head_data_retained()).astype(np.int64)
    removed: IntArray = np.unique(np.asarray(forgotten, dtype=np.int64))
    rng = child_rng(sc.seed, "audit", "targets", checkpoint)
    data = audit_data(
        ds.y_train, ds.y_test, ds.num_classes, rows=rows, removed=removed, config=config, rng=rng
    )
    fresh = retrained_extractor(fed)

    def view(train: FloatArray, test: FloatArray, role: str) -> ExtractorView:
        rng = child_rng(sc.seed, "audit", "lira", role, checkpoint)
        return extractor_view(train, test, data, head=fed.head.config, audit=config, rng=rng)

    own = view(fed.train_features, fed.featurizer(ds.x_test), "unlearned")
    retrained = own if not fresh.retrained else view(fresh.train, fresh.test, "retrained")
    heads = {
        "retrained": (head_on(fed, fresh.train), retrained),
        "same_extractor": (head_on(fed, fed.train_features), own),
        "unlearned": (np.asarray(fed.head.W, dtype=np.float64), own),
    }
    scores = score_models(
        heads, data, method=sc.method, seed=sc.seed, removed=int(removed.size), started=started
    )
    return section(scores, fresh)


def section(scores: Sequence[AuditScore], fresh: RetrainedExtractor) -> dict[str, Any]:
    """The event's ``audit`` section of one checkpoint's three scores."""
    by_model = {s.model: s for s in scores}
    first = scores[0]
    decided = audit_methods(scores)[0]
    return {
        "removed": first.removed,
        "members": first.members,
        "nonmembers": first.nonmembers,
        "seconds": first.seconds,
        "extractor": {
            "provenance": fresh.provenance,
            "retrained": fresh.retrained,
            "how": fresh.note,
            "seconds": fresh.seconds,
        },
        "models": {
            m: {
                "label": MODEL_LABELS[m],
                "auc": {a: _finite(by_model[m].auc[a]) for a in ATTACKS},
                "acc_test": by_model[m].acc_test,
            }
            for m in MODELS
        },
        "gaps": {
            a: {"extractor": _finite(v.extractor_gap), "head": _finite(v.head_gap)}
            for a, v in decided.verdicts.items()
        },
        "leak": decided.answer,
        "leak_note": ONE_SEED,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def scores_of(fed: Federation, audit: dict[str, Any]) -> list[AuditScore]:
    """The :class:`AuditScore` rows an event's ``audit`` section holds (one per model)."""
    sc = fed.scenario
    return [
        AuditScore(
            method=sc.method,
            seed=sc.seed,
            model=m,
            removed=int(audit["removed"]),
            auc={a: math.nan if v is None else float(v) for a, v in body["auc"].items()},
            acc_test=float(body["acc_test"]),
            members=int(audit["members"]),
            nonmembers=int(audit["nonmembers"]),
            seconds=float(audit["seconds"]),
        )
        for m, body in audit["models"].items()
    ]


def audited_checkpoints(batches: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every checkpoint entry of the batch events that carries an ``audit`` section."""
    return [c for b in batches for c in b.get("checkpoints", []) if "audit" in c]


#: How ``audit.md`` describes the three models of a run.
INTRO = (
    "Membership AUC, removed rows vs the test split, of (a) the model retrained from scratch "
    "on the retained rows D' with its extractor (the federation's own extractor training for "
    "its provenance; a public extractor is kept), (b) the run's extractor with the head "
    "retrained from scratch on D' (the checkpoint's reference A(D')), (c) the released head; "
    "one seed, so no standard deviation and no answer."
)


def audit_files(fed: Federation, batches: Sequence[dict[str, Any]]) -> dict[str, str]:
    """``audit.json`` and ``audit.md`` of the batch events' audits (none: empty).

    ``audit.json``: per checkpoint, the body :func:`~simulator.compare.audit_report.audit_json`
    writes for a comparison (every score, the gaps, the undetermined answer; ``extractor``:
    (a)'s provenance and how it was obtained) with the checkpoint and its removal count;
    ``audit.md``: per checkpoint, the comparison's Markdown section under a heading with the
    removal count.
    """
    entries = audited_checkpoints(batches)
    if not entries:
        return {}
    sc = fed.scenario
    checkpoints = []
    lines = [
        f"# Where does it leak? {sc.name}, method {sc.method}, seed {sc.seed}",
        "",
        "The membership audit of `unlearnsim run --audit` at every reference checkpoint "
        "(docs/comparison.md); " + ONE_SEED + ".",
        "",
    ]
    for entry in entries:
        audit = entry["audit"]
        scores = scores_of(fed, audit)
        extractor = audit["extractor"]
        body = json.loads(audit_json(sc.name, scores, extractor=extractor))
        checkpoints.append({"checkpoint": entry["checkpoint"], "removed": audit["removed"], **body})
        heading = f"## Checkpoint {entry['checkpoint']}: {audit['removed']} rows removed"
        lines += [
            audit_markdown(scores, heading=heading, intro=INTRO).rstrip(),
            f"* (a)'s extractor ({extractor['provenance']}): {extractor['how']}",
            "",
        ]
    out = {"scenario": sc.name, "method": sc.method, "seed": sc.seed, "checkpoints": checkpoints}
    return {AUDIT_JSON: json.dumps(out, indent=2) + "\n", AUDIT_MD: "\n".join(lines)}

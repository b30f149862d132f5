"""Per-example audit of the whole model: every draw trains the extractor again.

The per-example audit of :mod:`simulator.metrics.per_example` draws heads on *fixed* features:
it checks the head's certificate and cannot see what the extractor keeps of a removed row.
Here every draw runs the scenario's whole training from scratch under its own seed: the
extractor stage of ``model.extractor_data`` (FedAvg on every client's rows for ``private``,
DP-FedAvg with fresh accountants for ``dp``, the public pool alone for ``public``;
:func:`~simulator.runner.federation.extractor_stage`), the RFF map, and a certified head with
its own perturbation ``b`` on the clients' rows (the scenario's head settings, uniform sample
weights: the ``cr`` head). Two sides, ``draws`` models each:

* *unlearned*: trained on every client row ``D``, then the rows ``R`` removed from the head by
  one certified batch; the extractor keeps them (what a run releases);
* *retrained*: trained from scratch on the retained rows ``D'`` (every client row but ``R``).

Each row of ``R`` is scored by LiRA's ``phi`` in every model, through that model's own
extractor, and its epsilon is bounded from below at 95% confidence as in
:func:`~simulator.metrics.per_example.epsilon_lower_bounds`. The certificate of the release
compares exactly these two distributions: under ``public`` and ``dp`` it covers the whole
model (``(eps_head, delta_head)``, plus under ``dp`` the extractor's group charge
``|R| eps_x``), under ``private`` only the head; a bound above the certified epsilon refutes
it. Costs two trainings of the whole model per draw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.arrays import FloatArray, IntArray
from simulator.data.dataset import Dataset
from simulator.errors import InputError
from simulator.head import CertifiedHead, LocalHeadData
from simulator.metrics.per_example import epsilon_lower_bounds
from simulator.metrics.scores import class_probabilities, lira_phi
from simulator.models import resolve_device
from simulator.models.dp_fedavg import ClientAccountants
from simulator.runner.configs import head_config
from simulator.runner.extractor_limit import without
from simulator.runner.extractor_refit import retained_pools
from simulator.runner.featurize import in_process_round, train_featurizer
from simulator.runner.federation import (
    dp_guarantee,
    extractor_stage,
    load_dataset,
    split_clients,
)
from simulator.scenario import Scenario
from simulator.seeds import child_rng, child_seed

#: The two sides of the audit, in the order they are drawn.
SIDES = ("unlearned", "retrained")


@dataclass(frozen=True)
class WholeModelAudit:
    """What :func:`whole_model_audit` measured.

    Attributes
    ----------
    provenance : ``model.extractor_data`` of the audited scenario.
    removed : the removed training rows ``R`` (m,).
    epsilon_lower : (m,) lower confidence bounds on each row's epsilon.
    unlearned, retrained : (S, m) scores ``phi`` of the rows in each drawn model.
    retrains : how many unlearned heads' removals fell back to a retrain.
    head_epsilon : the largest epsilon a drawn unlearned head's certificate states.
    extractor_epsilon : ``dp``: the largest per-row ``eps_x`` of a released (unlearned side)
        extractor, from its accountants (the group charge for ``R`` is ``m`` times it); None
        otherwise.
    removes : whether the unlearned side removed ``R`` (False: the forgetting-nothing check).
    """

    provenance: str
    removed: IntArray
    epsilon_lower: FloatArray
    unlearned: FloatArray
    retrained: FloatArray
    retrains: int
    head_epsilon: float
    extractor_epsilon: float | None
    removes: bool = True

    @property
    def certified_epsilon(self) -> float | None:
        """The release's epsilon for ``D`` against ``D'``, or None where it covers the head only.

        ``public``: the head's; ``dp``: the head's plus the extractor's group charge
        ``m eps_x`` (:mod:`simulator.head.scope`); ``private``, or nothing removed: None.
        """
        if not self.removes:
            return None
        if self.provenance == "public":
            return self.head_epsilon
        if self.provenance == "dp" and self.extractor_epsilon is not None:
            return self.head_epsilon + self.removed.size * self.extractor_epsilon
        return None


def whole_model_audit(  # noqa: PLR0913 (the audited removal, then keyword-only options)
    scenario: Scenario,
    removed: Sequence[int],
    *,
    draws: int,
    seed: int,
    confidence: float = 0.95,
    remove: bool = True,
    progress: Callable[[int], None] | None = None,
) -> WholeModelAudit:
    """Audit the removal of ``removed`` (training row ids) from the whole model (module doc).

    ``remove=False`` audits a mechanism that forgets nothing (the models trained on every row
    are released as they are): what a leak looks like at this number of draws, whatever the
    extractors' own spread. ``progress`` is called with the number of models trained so far
    (``2 draws`` in all).

    Raises
    ------
    InputError
        ``removed`` is empty, has duplicates, or names a row no client holds.
    """
    ds = load_dataset(scenario)
    shards, public = split_clients(scenario, ds)
    rows = np.asarray(removed, dtype=np.int64)
    held = np.concatenate(shards)
    if rows.size == 0 or np.unique(rows).size != rows.size or not np.isin(rows, held).all():
        raise InputError("removed rows must be distinct training rows that clients hold")
    scores: dict[str, list[FloatArray]] = {side: [] for side in SIDES}
    retrains, head_eps, extractor_eps, trained = 0, 0.0, None, 0
    for s in range(draws):
        for side in SIDES:
            sc = scenario.model_copy(
                update={"seed": child_seed(seed, "whole-model-audit", side, s)}
            )
            kept = shards if side == "unlearned" else [without(sh, removed) for sh in shards]
            model = _trained(sc, ds, kept, public)
            if side == "unlearned":  # the released models: what the certificate states
                if remove:
                    positions = np.searchsorted(model.rows, rows)  # model.rows is sorted
                    report = model.head.remove([int(i) for i in positions])
                    retrains += int(report.retrained)
                head_eps = max(head_eps, model.head.epsilon_spent)
                if model.extractor_epsilon is not None:
                    extractor_eps = max(extractor_eps or 0.0, model.extractor_epsilon)
            probabilities = class_probabilities(model.features[rows] @ model.head.W)
            scores[side].append(lira_phi(probabilities, ds.y_train[rows]))
            trained += 1
            if progress is not None:
                progress(trained)
    U, R = np.stack(scores["unlearned"]), np.stack(scores["retrained"])
    bounds = epsilon_lower_bounds(U, R, delta=scenario.head.delta, confidence=confidence)
    provenance = scenario.model.extractor_data
    return WholeModelAudit(
        provenance, rows, bounds, U, R, retrains, head_eps, extractor_eps, removes=remove
    )


@dataclass(frozen=True)
class _Model:
    """One drawn model: every training row's features, the head and the rows it read."""

    features: FloatArray
    head: CertifiedHead
    rows: IntArray
    extractor_epsilon: float | None


def _trained(scenario: Scenario, ds: Dataset, shards: list[IntArray], public: IntArray) -> _Model:
    """The scenario's extractor stage and a certified head, from scratch, on ``shards``."""
    device = resolve_device(scenario.device)
    accountants = ClientAccountants() if scenario.model.extractor_data == "dp" else None
    pools = retained_pools(ds, dict(enumerate(shards)), len(shards))
    clients_round = in_process_round(scenario, ds, pools, device=device, accountants=accountants)
    pool, local_round = extractor_stage(scenario, ds, shards, public, clients_round)
    featurizer = train_featurizer(scenario, ds, pool, local_round=local_round, device=device)
    features = featurizer(ds.x_train)
    rows = np.sort(np.concatenate(shards))
    data = LocalHeadData(features[rows], ds.y_train[rows], ds.num_classes)
    head = CertifiedHead(data, head_config(scenario), rng=child_rng(scenario.seed, "head"))
    eps = None
    if accountants is not None:
        eps = dp_guarantee(scenario, accountants).epsilon
    return _Model(features, head, rows, eps)

"""Privacy, drift and certificate metrics of a run, for the current head and the retrained one.

A :class:`RunMonitor` is created before the first deletion (``loop.apply_batch``) and freezes
what later numbers are compared with: the MMD bandwidth (median heuristic on the training
features), a reference half of the test set, the MIA holdout, the label distributions at the
start, and the offline-LiRA reference heads (retrained at checkpoints). Per evaluated batch it
returns JSON-ready sections (``docs/metrics.md`` lists every key):

* ``privacy``: threshold attacks and LiRA on the accumulated forget set vs the holdout, MIA
  efficacy, the forget loss and how many samples each estimate used;
* ``drift``: feature MMD^2 with permutation p-values, label TV / JS / chi-square, and the
  alarms of the online detectors over accuracy, forget loss and MIA AUC;

and :meth:`RunMonitor.model_sections` gives the model-dependent part for any head, so the
retrained reference at a checkpoint gets the same numbers ("ours vs ideal"). Feature MMD^2 is
computed on the frozen features both heads share, so it is the same for both by construction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.arrays import FloatArray, IntArray
from simulator.features.rff import median_bandwidth_of_rows
from simulator.head import predict_classes
from simulator.metrics import (
    AttackSummary,
    ChangeMonitor,
    LiraReferences,
    fpr_label,
    label_distribution,
    label_shift,
    lira_scores,
    membership_scores,
    mia_efficacy,
    mmd_permutation_test,
    out_mask_for,
    reference_phi,
    summarize_attack,
    threshold_attacks,
    train_references,
)
from simulator.metrics.drift import js_divergence, total_variation
from simulator.runner.federation import Federation
from simulator.seeds import child_rng

#: Scalar streams watched by the online change detectors (bounded metric labels).
DETECTOR_STREAMS: tuple[str, ...] = ("accuracy", "forget_loss", "mia_auc")


def _cap(ids: IntArray, k: int, rng: np.random.Generator) -> IntArray:
    """At most ``k`` of ``ids``, drawn without replacement and kept in order."""
    if ids.size <= k:
        return ids
    return np.sort(rng.choice(ids, size=k, replace=False)).astype(np.int64)


def attack_dict(s: AttackSummary) -> dict[str, Any]:
    """JSON form of one attack's ROC summaries."""
    return {
        "auc": s.auc,
        "advantage": s.advantage,
        "tpr_at_fpr": {fpr_label(f): v for f, v in s.tpr_at_fpr.items()},
        "members": s.members,
        "nonmembers": s.nonmembers,
    }


@dataclass
class RunMonitor:
    """Frozen comparison baselines of a run plus the stateful detectors (module docstring)."""

    fed: Federation
    bandwidth: float
    holdout: IntArray
    test_reference: IntArray
    test_eval: IntArray
    initial_labels: FloatArray
    start_predictions: FloatArray
    changes: ChangeMonitor | None
    refs: LiraReferences | None = None
    _holdout_ref_phi: FloatArray | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ set-up
    @classmethod
    def start(cls, fed: Federation) -> RunMonitor:
        """Freeze the baselines from the federation before its first deletion."""
        spec = fed.scenario.evaluation
        rng = child_rng(fed.scenario.seed, "metrics")
        rows = fed.head_data_retained()
        Z0, y0 = fed.eval_sets.features("test", 0)
        order = rng.permutation(y0.size).astype(np.int64)
        half = y0.size // 2
        monitor = cls(
            fed=fed,
            bandwidth=median_bandwidth_of_rows(fed.train_features, rows, rng=rng, max_samples=1000),
            holdout=np.sort(_cap(np.arange(y0.size, dtype=np.int64), spec.max_samples, rng)),
            test_reference=np.sort(order[:half]),
            test_eval=np.sort(order[half:]),
            initial_labels=label_distribution(fed.dataset.y_train[rows], fed.dataset.num_classes),
            start_predictions=label_distribution(fed.head.predict(Z0), fed.dataset.num_classes),
            changes=ChangeMonitor(DETECTOR_STREAMS, detectors=spec.detectors)
            if spec.detectors
            else None,
        )
        monitor.refresh_references(0)
        return monitor

    def rebase(self, index: int) -> float:
        """The extractor was retrained (``extractor_limit``): re-freeze what read its features.

        The MMD bandwidth (median heuristic on the retained rows' new features) and the LiRA
        reference heads (trained again on the new features) follow the new extractor; the
        online detectors start again (the model changed by construction: a jump in its
        accuracy or MIA stream is not drift). What reads no feature stays: the holdout and
        test halves, the label distributions at the start and the start's predicted-label
        distribution (labels compare across extractors). Returns seconds.
        """
        fed = self.fed
        spec = fed.scenario.evaluation
        rng = child_rng(fed.scenario.seed, "metrics", "extractor", index)
        rows = fed.head_data_retained()
        self.bandwidth = median_bandwidth_of_rows(
            fed.train_features, rows, rng=rng, max_samples=1000
        )
        if spec.detectors:
            self.changes = ChangeMonitor(DETECTOR_STREAMS, detectors=spec.detectors)
        return self.refresh_references(index)

    def refresh_references(self, index: int) -> float:
        """(Re)train the LiRA reference heads on the retained rows; returns seconds."""
        fed = self.fed
        spec = fed.scenario.evaluation
        if "lira" not in spec.attacks:
            return 0.0
        t = time.perf_counter()
        rng = child_rng(fed.scenario.seed, "lira", index)
        self.refs = train_references(
            fed.train_features,
            fed.dataset.y_train,
            fed.head_data_retained(),
            fed.dataset.num_classes,
            count=spec.lira_references,
            lam=fed.head.config.lam,
            sigma=fed.head.config.sigma,
            rng=rng,
        )
        Zh, yh = self._holdout()
        self._holdout_ref_phi = reference_phi(self.refs, Zh, yh)
        return time.perf_counter() - t

    # ------------------------------------------------------------------ sets
    def _holdout(self) -> tuple[FloatArray, IntArray]:
        Z0, y0 = self.fed.eval_sets.features("test", 0)
        return Z0[self.holdout], y0[self.holdout]

    def _retain_probe(self) -> IntArray:
        fed = self.fed
        retained = np.zeros(fed.dataset.y_train.size, dtype=bool)
        retained[fed.head_data_retained()] = True
        probe = fed.retain_probe
        return probe[retained[probe]].astype(np.int64)

    def sample_sets(self, forgotten: list[int], index: int) -> dict[str, IntArray]:
        """Forget and retain ids this batch's estimates use (capped, deterministic)."""
        cap = self.fed.scenario.evaluation.max_samples
        rng = child_rng(self.fed.scenario.seed, "metrics", index + 1)
        forget = np.unique(np.asarray(forgotten, dtype=np.int64))
        return {"forget": _cap(forget, cap, rng), "retain": _cap(self._retain_probe(), cap, rng)}

    # ------------------------------------------------------------------ model-dependent
    def model_sections(
        self, W: FloatArray, sets: dict[str, IntArray], tick: int, index: int
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
        """``privacy``, model-dependent ``drift`` and timings for the head ``W``."""
        t = time.perf_counter()
        privacy = self._privacy(W, sets, index)
        t_mia = time.perf_counter() - t
        Zt, _ = self.fed.eval_sets.features("test", tick)
        pred = label_distribution(predict_classes(Zt @ W), self.fed.dataset.num_classes)
        drift = {
            "label": {
                "predicted_test_vs_start": {
                    "tv": total_variation(pred, self.start_predictions),
                    "js": js_divergence(pred, self.start_predictions),
                }
            }
        }
        return privacy, drift, {"evaluation_mia": t_mia}

    def _privacy(self, W: FloatArray, sets: dict[str, IntArray], index: int) -> dict[str, Any]:
        fed, spec = self.fed, self.fed.scenario.evaluation
        Z, y = fed.train_features, fed.dataset.y_train
        forget, retain = sets["forget"], sets["retain"]
        Zh, yh = self._holdout()
        sf = membership_scores(Z[forget] @ W, y[forget])
        sh = membership_scores(Zh @ W, yh)
        names = [a for a in spec.attacks if a != "lira"]
        attacks = {k: attack_dict(v) for k, v in threshold_attacks(sf, sh, attacks=names).items()}
        if "lira" in spec.attacks and self.refs is not None:
            if forget.size:
                ref_f = reference_phi(self.refs, Z[forget], y[forget])
                lf = lira_scores(
                    self.refs, sf.phi, ref_f, out_mask_for(self.refs, forget, forget.size)
                )
            else:
                lf = np.zeros(0)
            assert self._holdout_ref_phi is not None
            lh = lira_scores(
                self.refs, sh.phi, self._holdout_ref_phi, out_mask_for(self.refs, None, yh.size)
            )
            attacks["lira"] = attack_dict(summarize_attack(lf, lh))
        rng = child_rng(fed.scenario.seed, "efficacy", index)
        sr = membership_scores(Z[retain] @ W, y[retain])
        eff = mia_efficacy(sr.raw_entropy, sh.raw_entropy, sf.raw_entropy, rng=rng)
        return {
            "attacks": attacks,
            "efficacy": eff.efficacy,
            "forget_loss": float(np.mean(-sf.loss)) if forget.size else float("nan"),
            "samples": {
                "forget": int(forget.size),
                "holdout": int(yh.size),
                "retain": int(retain.size),
            },
        }

    # ------------------------------------------------------------------ data drift
    def data_drift(self, sets: dict[str, IntArray], tick: int, index: int) -> dict[str, Any]:
        """Feature MMD^2 and label shift of the data (the same for every head)."""
        fed, spec = self.fed, self.fed.scenario.evaluation
        k = fed.dataset.num_classes
        rng = child_rng(fed.scenario.seed, "drift", index)
        Z, y = fed.train_features, fed.dataset.y_train
        Z0, y0 = fed.eval_sets.features("test", 0)
        Zt, yt = fed.eval_sets.features("test", tick)
        # rows stay aligned unless a class_prior shift resampled the test set
        cur = self.test_eval if yt.size == y0.size else np.arange(yt.size, dtype=np.int64)
        forget, retain = sets["forget"], sets["retain"]
        n = spec.mmd_samples
        pairs = {
            "forget_vs_retain": (Z[_cap(forget, n, rng)], Z[_cap(retain, n, rng)]),
            "test_vs_reference": (Zt[_cap(cur, n, rng)], Z0[_cap(self.test_reference, n, rng)]),
        }
        feature: dict[str, Any] = {}
        for name, (A, B) in pairs.items():
            if A.shape[0] >= 2 and B.shape[0] >= 2:
                res = mmd_permutation_test(
                    A, B, self.bandwidth, permutations=spec.mmd_permutations, rng=rng
                )
                feature[name] = {
                    "mmd2": res.mmd2,
                    "p_value": res.p_value,
                    "permutations": res.permutations,
                    "sizes": list(res.sizes),
                }
        label: dict[str, Any] = {}
        for name, (a, b) in {
            "forget_vs_retain": (y[forget], y[retain]),
            "test_vs_reference": (yt[cur], y0[self.test_reference]),
        }.items():
            if a.size and b.size:
                s = label_shift(a, b, k)
                label[name] = {"tv": s.tv, "js": s.js, "chi2_p_value": s.chi2_p_value}
        now = label_distribution(y[fed.head_data_retained()], k)
        label["retained_vs_initial"] = {
            "tv": total_variation(now, self.initial_labels),
            "js": js_divergence(now, self.initial_labels),
        }
        return {"feature": feature, "label": label}

    # ------------------------------------------------------------------ detectors
    def detect(self, accuracy: float | None, privacy: dict[str, Any]) -> list[dict[str, Any]]:
        """Feed the online detectors; returns the alarms of this batch."""
        if self.changes is None:
            return []
        attacks = privacy.get("attacks", {})
        first: dict[str, Any] = attacks.get("loss") or next(iter(attacks.values()), {})
        values = {
            "accuracy": float("nan") if accuracy is None else accuracy,
            "forget_loss": privacy.get("forget_loss", float("nan")),
            "mia_auc": first.get("auc", float("nan")),
        }
        return [
            {"detector": d.detector, "stream": d.stream, "step": d.step, "value": d.value}
            for d in self.changes.update(values)
        ]

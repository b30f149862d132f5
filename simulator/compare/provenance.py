"""What a comparison's certificates cover: the extractor's provenance, scope and epsilon.

Every comparison states, in ``fits.json``, ``audit.json`` and ``table.md``, the extractor's
provenance (``model.extractor_data``) and what the head-based methods' certificates then
cover (:func:`simulator.head.scope.certificate_scope`, one row):

* ``private``: scope ``head``, no whole-model epsilon;
* ``public``: scope ``whole_model``, the extractor's part ``(0, 0)``;
* ``dp``: scope ``whole_model``; the extractor's ``(epsilon_x, delta_x)`` is the one its
  accountants computed over all rounds (``extractor_epsilon`` of every fit's info, the max
  over clients), composed with the head's ``(epsilon, delta)``::

      epsilon_total = epsilon_head + k epsilon_x
      delta_total   = delta_head + k e^((k-1) epsilon_x) delta_x

  (here for ``k = 1``; a request of ``k`` rows pays ``k epsilon_x``, group privacy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from simulator.compare.workload import Workload
from simulator.head.scope import PUBLIC, ExtractorGuarantee, certificate_scope


class FitRecord(Protocol):
    """What this module reads of a fit (``simulator.compare.harness.FitRecord``)."""

    @property
    def seed(self) -> int:
        """The fit's seed."""
        ...

    @property
    def info(self) -> Mapping[str, float]:
        """The method's own numbers (``extractor_epsilon`` among them under ``dp``)."""
        ...


@dataclass(frozen=True)
class Provenance:
    """The extractor's provenance and the head's certified ``(epsilon, delta)`` of a comparison.

    ``mechanism`` names the DP-FedAvg settings under ``dp`` (empty otherwise).
    """

    extractor_data: str = "private"
    head_epsilon: float = math.nan
    head_delta: float = math.nan
    mechanism: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, workload: Workload) -> Provenance:
        """The provenance of ``workload``'s scenario."""
        m = workload.scenario.model
        mechanism: dict[str, float] = {}
        if m.extractor_data == "dp":
            mechanism = {
                "noise_multiplier": m.dp.noise_multiplier,
                "max_grad_norm": m.dp.max_grad_norm,
                "delta": m.dp.delta,
                "rounds": m.rounds,
                "local_epochs": m.local_epochs,
                "batch_size": m.batch_size,
                "clients": workload.scenario.partition.num_clients,
            }
        head = workload.settings.head
        return cls(m.extractor_data, head.epsilon, head.delta, mechanism)

    @classmethod
    def from_json(cls, body: Mapping[str, Any] | None) -> Provenance:
        """The inverse of :meth:`record`'s ``provenance`` entry (default: ``private``)."""
        if not body:
            return cls()
        return cls(
            str(body.get("extractor_data", "private")),
            _num(body.get("head_epsilon")),
            _num(body.get("head_delta")),
            {str(k): float(v) for k, v in dict(body.get("mechanism", {})).items()},
        )


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def seed_epsilons(fits: Sequence[FitRecord]) -> dict[int, float]:
    """The DP extractor's accounted epsilon of every seed (the max over its fits' extractors)."""
    out: dict[int, float] = {}
    for f in fits:
        eps = f.info.get("extractor_epsilon")
        if eps is not None and math.isfinite(eps):
            out[f.seed] = max(out.get(f.seed, 0.0), float(eps))
    return out


def record(provenance: Provenance, fits: Sequence[FitRecord]) -> dict[str, Any]:
    """The ``extractor`` entry of ``fits.json`` and ``audit.json`` (module docstring)."""
    per_seed = seed_epsilons(fits)
    part: ExtractorGuarantee | None = None
    if provenance.extractor_data == "dp":
        eps = max(per_seed.values()) if per_seed else None
        part = ExtractorGuarantee(eps, provenance.mechanism.get("delta", 0.0))
    elif provenance.extractor_data == "public":
        part = PUBLIC
    head_eps, head_delta = provenance.head_epsilon, provenance.head_delta
    scope = certificate_scope(
        provenance.extractor_data,
        head_eps if math.isfinite(head_eps) else 0.0,
        head_delta if math.isfinite(head_delta) else 0.0,
        extractor=part,
    )
    return {
        "provenance": asdict(provenance),
        "scope": scope.scope,
        "extractor_epsilon": None if part is None else _finite(part.epsilon),
        "extractor_delta": None if part is None else part.delta,
        "extractor_epsilon_per_seed": {str(s): e for s, e in sorted(per_seed.items())},
        "total_epsilon_one_row": scope.total_epsilon,
        "total_delta_one_row": scope.total_delta,
    }


def markdown(entry: Mapping[str, Any]) -> str:
    """The ``table.md`` section of an :func:`record` entry."""
    p = entry["provenance"]
    data = p["extractor_data"]
    lines = ["## What the certificates cover (extractor provenance)", ""]
    text = f"* provenance `model.extractor_data: {data}`; scope `{entry['scope']}`"
    if entry["scope"] == "head":
        text += " (the extractor saw every client's row without a guarantee: head only)"
    lines.append(text)
    eps, delta = entry["extractor_epsilon"], entry["extractor_delta"]
    if data == "dp":
        mech = p["mechanism"]
        seeds = entry["extractor_epsilon_per_seed"]
        values = ", ".join(f"{v:.3f}" for v in seeds.values())
        lines.append(
            f"* extractor: DP-FedAvg, noise multiplier {mech['noise_multiplier']:g}, clipping "
            f"norm {mech['max_grad_norm']:g}, {mech['rounds']:g} rounds x "
            f"{mech['local_epochs']:g} local epochs, batch {mech['batch_size']:g}, "
            f"{mech['clients']:g} clients; accounted per-row epsilon "
            f"{'n/a' if eps is None else f'{eps:.3f}'} at delta {delta:g} (max over clients "
            f"and seeds; per seed: {values})"
        )
    elif data == "public":
        lines.append("* extractor: fitted on the public pool only, its part (0, 0)")
    total = entry["total_epsilon_one_row"]
    if total is not None:
        lines.append(
            f"* whole model, one row: epsilon {total:.3f}, delta {entry['total_delta_one_row']:.3g}"
            f" (head {p['head_epsilon']:g}, {p['head_delta']:g}; a request of k rows adds "
            "k x the extractor's epsilon)"
        )
    return "\n".join(lines) + "\n"

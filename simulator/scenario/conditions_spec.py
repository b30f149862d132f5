"""Scenario sections for the evaluation conditions: distribution shifts, OOD split, cadence.

The OOD construction is the paper's (DecoRemoval, Sec. 4.1): a ``fraction`` of
the test samples of class A is presented with the label of class B.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from simulator.scenario._base import (
    MAX_ITERATIONS,
    MAX_ROWS,
    MAX_SCALE,
    MAX_TICKS,
    Checks,
    Section,
)


class ShiftSpec(Section):
    """A distribution shift of the evaluation data that starts at a tick and stays."""

    kind: Literal["gaussian_noise", "rotation", "class_prior"] = Field(
        description="gaussian_noise: additive noise on inputs; rotation: rotate images; "
        "class_prior: resample the test labels to a new prior."
    )
    start: int = Field(ge=0, le=MAX_TICKS, description="Tick from which the shift is active.")
    severity: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SCALE,
        description="Noise std (gaussian_noise) or degrees (rotation).",
    )
    prior: list[float] | None = Field(
        default=None, description="Class prior over the in-distribution classes (class_prior)."
    )
    applies_to: Literal["test", "ood", "both"] = Field(
        default="test", description="Evaluation split(s) the shift applies to."
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> ShiftSpec:
        checks = Checks()
        if self.kind == "class_prior":
            if self.prior is None:
                checks.add(("prior",), "kind 'class_prior' needs prior, got nothing")
            else:
                if any(p < 0 for p in self.prior) or not math.isclose(
                    sum(self.prior), 1.0, abs_tol=1e-6
                ):
                    checks.add(("prior",), "should be >= 0 and sum to 1", got=self.prior)
            if self.severity is not None:
                checks.add(("severity",), "not used by kind 'class_prior' (give prior)")
        else:
            if self.severity is None:
                checks.add(("severity",), f"kind '{self.kind}' needs severity, got nothing")
            if self.prior is not None:
                checks.add(("prior",), f"only for kind 'class_prior', kind is '{self.kind}'")
        checks.raise_if_any()
        return self


class OODSpec(Section):
    """Label-swap OOD test split: ``fraction`` of class A test samples labelled as class B."""

    kind: Literal["label_swap"] = Field(
        default="label_swap", description="Construction (label_swap)."
    )
    source_class: int = Field(ge=0, description="Class A whose test samples are relabelled.")
    target_class: int = Field(ge=0, description="Class B, the label they are presented with.")
    fraction: float = Field(default=0.1, gt=0, le=1, description="Share of class A test samples.")

    @model_validator(mode="after")
    def _distinct(self) -> OODSpec:
        checks = Checks()
        if self.source_class == self.target_class:
            checks.add(("target_class",), "should differ from source_class", got=self.target_class)
        checks.raise_if_any()
        return self


class EvaluationSpec(Section):
    """When metrics are computed."""

    every: int = Field(
        default=1, ge=1, le=MAX_ITERATIONS, description="Deletion batches between cheap metrics."
    )
    checkpoints: list[int] = Field(
        default=[],
        description="Cumulative removed-sample counts at which the retrain reference is computed.",
    )
    retrain_reference: bool = Field(
        default=True, description="Compute the retrain reference at all."
    )
    attacks: list[Literal["loss", "confidence", "entropy", "modified_entropy", "lira"]] = Field(
        default=["loss", "confidence", "entropy", "modified_entropy", "lira"],
        description="Membership-inference attacks run on the forget set ([] for none).",
    )
    lira_references: int = Field(
        default=8, ge=2, le=256, description="Reference heads of offline LiRA (if 'lira')."
    )
    max_samples: int = Field(
        default=2000,
        ge=10,
        le=MAX_ROWS,
        description="Most forget/holdout/retain samples one attack uses.",
    )
    mmd_samples: int = Field(
        default=300, ge=4, le=5000, description="Rows per side of each MMD two-sample test."
    )
    mmd_permutations: int = Field(
        default=200, ge=1, le=10000, description="Permutations of the MMD p-value."
    )
    detectors: list[Literal["adwin", "page_hinkley"]] = Field(
        default=["adwin", "page_hinkley"],
        description="Online change detectors over per-batch metrics ([] for none).",
    )

    @field_validator("checkpoints")
    @classmethod
    def _increasing(cls, checkpoints: list[int]) -> list[int]:
        if any(c < 1 for c in checkpoints) or any(
            a >= b for a, b in itertools.pairwise(checkpoints)
        ):
            raise ValueError("should be positive and strictly increasing")
        return checkpoints

    @field_validator("attacks", "detectors")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("should not repeat a name")
        return names

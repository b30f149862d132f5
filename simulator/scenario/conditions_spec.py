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
    MAX_ROWS,
    MAX_TICKS,
    Checks,
    NonNegativeScale,
    PositiveIterations,
    Section,
    refuse,
)


class ShiftSpec(Section):
    """A distribution shift of the evaluation data that starts at a tick and stays."""

    kind: Literal["gaussian_noise", "rotation", "class_prior"] = Field(
        description="gaussian_noise: additive noise on inputs; rotation: rotate images; "
        "class_prior: resample the test labels to a new prior."
    )
    start: int = Field(ge=0, le=MAX_TICKS, description="Tick from which the shift is active.")
    severity: NonNegativeScale | None = Field(
        default=None, description="Noise std (gaussian_noise) or degrees (rotation)."
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
        if self.source_class == self.target_class:
            refuse(("target_class",), "should differ from source_class", got=self.target_class)
        return self


class ShiftSplitSpec(Section):
    """A named, fixed evaluation split derived from the test set (used by ``compare``).

    ``gaussian_noise`` and ``rotation`` apply :func:`simulator.data.shift.apply_shift` to the
    whole test split at ``severity``; ``digits`` is a natural shift for MNIST-like 28x28 digit
    sources: scikit-learn's 8x8 digits (other writers, other scanner) upscaled into MNIST's
    20x20 box; ``remaining`` holds the rows of the labels outside ``data.classes`` (the paper's
    "remaining digits"; no accuracy, only what the model predicts on them).
    """

    name: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$", description="Split name in the tables (e.g. noise_1)."
    )
    kind: Literal["gaussian_noise", "rotation", "digits", "remaining"] = Field(
        description="gaussian_noise / rotation: covariate shift of the test inputs; digits: "
        "scikit-learn digits as MNIST-sized images (natural shift); remaining: rows of the "
        "classes left out by data.classes."
    )
    severity: float | None = Field(
        default=None,
        ge=0,
        description="gaussian_noise: noise std in units of the inputs' std; rotation: angles "
        "U(-90 s, 90 s) degrees.",
    )
    max_rows: int = Field(default=2000, ge=1, description="Cap on rows (seeded sample).")

    @model_validator(mode="after")
    def _severity(self) -> ShiftSplitSpec:
        checks = Checks()
        needs = self.kind in ("gaussian_noise", "rotation")
        if needs and self.severity is None:
            checks.add(("severity",), f"kind '{self.kind}' needs severity, got nothing")
        if not needs and self.severity is not None:
            checks.add(("severity",), f"not used by kind '{self.kind}'", got=self.severity)
        checks.raise_if_any()
        return self


class EvaluationSpec(Section):
    """When metrics are computed."""

    every: PositiveIterations = Field(
        default=1, description="Deletion batches between cheap metrics."
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
    audit: bool = Field(
        default=False,
        description="At every checkpoint, the membership audit 'where does it leak?': models "
        "retrained from scratch (extractor included), same extractor with the head retrained, "
        "and unlearned, attacked alike (`run --audit`).",
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
    shift_splits: list[ShiftSplitSpec] = Field(
        default=[],
        description="Named shifted evaluation splits measured by `unlearnsim compare` "
        "(covariate shifts of the test set, natural shifts, remaining classes).",
    )

    @field_validator("checkpoints")
    @classmethod
    def _increasing(cls, checkpoints: list[int]) -> list[int]:
        if any(c < 1 for c in checkpoints) or any(
            a >= b for a, b in itertools.pairwise(checkpoints)
        ):
            raise ValueError("should be positive and strictly increasing")
        return checkpoints

    @model_validator(mode="after")
    def _audit_at_checkpoints(self) -> EvaluationSpec:
        checks = Checks()
        if self.audit and not (self.checkpoints and self.retrain_reference):
            checks.add(
                ("audit",),
                "the audit runs at the reference checkpoints: give evaluation.checkpoints and "
                "keep evaluation.retrain_reference true",
            )
        checks.raise_if_any()
        return self

    @field_validator("shift_splits")
    @classmethod
    def _unique_splits(cls, splits: list[ShiftSplitSpec]) -> list[ShiftSplitSpec]:
        names = [s.name for s in splits]
        if len(set(names)) != len(names) or {"test", "label_swap"} & set(names):
            raise ValueError("names should be unique and not 'test' or 'label_swap'")
        return splits

    @field_validator("attacks", "detectors")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("should not repeat a name")
        return names

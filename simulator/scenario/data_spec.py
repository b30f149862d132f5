"""Scenario sections that describe the data: source, text handling, synthetic generator, partition.

See ``docs/scenarios.md`` for the meaning and default of every key. The data
sources are the offline ones listed in ``notes/data.md``; the paper's MNIST
3-vs-8 in-distribution / other-digits-OOD split is expressed with
``classes: [3, 8]`` (DecoRemoval, Sec. 4.1).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from simulator.scenario._base import (
    MAX_CLASSES,
    MAX_CLIENTS,
    MAX_WIDTH,
    Checks,
    NonNegativeScale,
    PositiveScale,
    Rows,
    Section,
    Width,
    refuse,
)

DataSource = Literal[
    "synthetic",
    "mnist",
    "fashion_mnist",
    "digits",
    "rotten_tomatoes",
    "gss_happiness",
    "adult",
    "idx",
    "cifar10",
    "sst2",
    "csv",
]
#: Partition schemes (:func:`simulator.data.partition`).
PartitionKind = Literal["iid", "dirichlet", "covariate", "quantity"]
#: Sources whose samples are sentences (they accept the ``text`` section).
TEXT_SOURCES: tuple[str, ...] = ("rotten_tomatoes", "sst2")
#: Sources whose samples are images (they accept a ``rotation`` shift).
IMAGE_SOURCES: tuple[str, ...] = ("mnist", "fashion_mnist", "digits", "idx", "cifar10")
#: Sources that read the user's files and so need ``path``.
PATH_REQUIRED: tuple[str, ...] = ("idx", "cifar10", "sst2", "csv")
#: Sources that read files from a default location that ``path`` may replace.
PATH_OPTIONAL: tuple[str, ...] = ("fashion_mnist",)
#: Labels of the sources whose label count is known before loading (at most this many for
#: fashion_mnist with ``path``); their class ids are ``0..count-1``.
SOURCE_CLASSES: dict[str, int] = {
    "mnist": 10,
    "fashion_mnist": 10,
    "digits": 10,
    "rotten_tomatoes": 2,
    "sst2": 2,
    "gss_happiness": 3,
    "adult": 2,
    "cifar10": 10,
}


class TextSpec(Section):
    """How sentences become model inputs (text sources only)."""

    representation: Literal["embedding", "tokens"] = Field(
        default="embedding",
        description="embedding: fixed sentence embeddings (any backbone); "
        "tokens: token ids for an lstm/transformer backbone.",
    )
    max_len: Width = Field(default=48, description="Tokens kept per sentence (tokens only).")
    vocab_size: int = Field(
        default=5000, ge=2, le=MAX_WIDTH, description="Vocabulary size, incl. padding/unknown."
    )


class SyntheticSpec(Section):
    """Generator of a classification task with causal and spurious features.

    The task of :func:`simulator.data.synthetic.make_synthetic`: ``n_causal`` causal columns,
    one spurious column (so ``n_features >= n_causal + 1``), the rest nuisance.
    """

    n_train: Rows = Field(default=2000, description="Training samples.")
    n_test: Rows = Field(default=1000, description="Test samples.")
    n_features: int = Field(default=20, ge=2, le=MAX_WIDTH, description="Input dimension.")
    n_classes: int = Field(default=2, ge=2, le=MAX_CLASSES, description="Number of classes.")
    n_causal: int = Field(default=5, ge=1, description="Features that cause the label.")
    spurious_strength: float = Field(
        default=0.9, ge=0, le=1, description="How strongly the spurious features track the label."
    )
    noise: NonNegativeScale = Field(default=0.5, description="Std of the additive feature noise.")
    correlation: float = Field(
        default=0.5, ge=0, lt=1, description="Correlation between neighbouring causal features."
    )
    shifted_strength: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Spurious strength of the shifted (OOD) test set; "
        "null = 1 - spurious_strength.",
    )
    n_shifted: Rows | None = Field(default=None, description="Shifted test samples; null = n_test.")

    @model_validator(mode="after")
    def _spurious_column_fits(self) -> SyntheticSpec:
        if self.n_causal >= self.n_features:
            refuse(
                ("n_causal",),
                f"should be below n_features ({self.n_features}): one column is spurious",
                got=self.n_causal,
            )
        return self


class DataSpec(Section):
    """Which dataset, which classes and how much of it."""

    source: DataSource = Field(description="Dataset to load.")
    path: str | None = Field(default=None, description="File or folder (idx, cifar10, sst2, csv).")
    label_column: str | None = Field(default=None, description="Label column of a csv file.")
    classes: list[int] | None = Field(
        default=None, description="In-distribution labels; samples of other labels become OOD."
    )
    max_train: Rows | None = Field(default=None, description="Cap on training samples.")
    max_test: Rows | None = Field(default=None, description="Cap on test samples.")
    test_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="Test share when the source has no fixed split."
    )
    text: TextSpec | None = Field(default=None, description="Text settings (text sources only).")
    synthetic: SyntheticSpec | None = Field(
        default=None, description="Generator settings (synthetic only)."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_sections(cls, raw: Any) -> Any:
        """Give text sources a ``text`` and ``synthetic`` a ``synthetic`` section."""
        if isinstance(raw, dict):
            source = raw.get("source")
            if source in TEXT_SOURCES and raw.get("text") is None:
                raw = {**raw, "text": {}}
            if source == "synthetic" and raw.get("synthetic") is None:
                raw = {**raw, "synthetic": {}}
        return raw

    @model_validator(mode="after")
    def _consistent(self) -> DataSpec:
        """Each setting is used by the source, and the source has what it needs."""
        checks = Checks()
        src = self.source
        if src in PATH_REQUIRED and self.path is None:
            checks.add(("path",), f"source '{src}' needs a path to the data, got nothing")
        if self.path is not None and src not in PATH_REQUIRED + PATH_OPTIONAL:
            checks.add(("path",), f"not used by source '{src}'", got=self.path)
        if src == "csv" and self.label_column is None:
            checks.add(("label_column",), "source 'csv' needs label_column, got nothing")
        if src != "csv" and self.label_column is not None:
            checks.add(("label_column",), "only used by source 'csv'", got=self.label_column)
        if self.text is not None and src not in TEXT_SOURCES:
            checks.add(
                ("text",),
                f"only for text sources ({', '.join(TEXT_SOURCES)}), source is '{src}'",
            )
        if self.synthetic is not None and src != "synthetic":
            checks.add(("synthetic",), f"only for source 'synthetic', source is '{src}'")
        if self.classes is not None:
            self._check_classes(checks, self.classes)
        checks.raise_if_any()
        return self

    def _check_classes(self, checks: Checks, classes: list[int]) -> None:
        """``classes``: at least 2 distinct labels, >= 0, and below the synthetic class count."""
        if len(set(classes)) < 2 or len(set(classes)) != len(classes):
            checks.add(("classes",), "should be at least 2 distinct labels", got=classes)
        if any(c < 0 for c in classes):
            checks.add(("classes",), "labels should be >= 0", got=classes)
        if self.synthetic is not None and any(c >= self.synthetic.n_classes for c in classes):
            checks.add(
                ("classes",),
                f"labels should be < synthetic.n_classes ({self.synthetic.n_classes})",
                got=classes,
            )

    @property
    def uses_tokens(self) -> bool:
        """Whether the model receives token ids (text source with ``tokens``)."""
        return self.text is not None and self.text.representation == "tokens"

    @property
    def static_num_classes(self) -> int | None:
        """Labels of the source when known before loading (synthetic, :data:`SOURCE_CLASSES`).

        None for sources whose labels are only known once loaded (idx, csv).
        """
        if self.synthetic is not None:
            return self.synthetic.n_classes
        return SOURCE_CLASSES.get(self.source)


class PartitionSpec(Section):
    """How the training data is split over the clients."""

    kind: PartitionKind = Field(
        default="iid",
        description="iid; dirichlet label skew; covariate skew; quantity skew.",
    )
    num_clients: int = Field(default=5, ge=1, le=MAX_CLIENTS, description="Number of clients.")
    alpha: PositiveScale = Field(
        default=0.5, description="Dirichlet concentration (dirichlet, quantity); smaller = skewier."
    )

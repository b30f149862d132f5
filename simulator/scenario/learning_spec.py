"""Scenario sections of the learner: backbone, RFF map, decorrelation and the certified head.

The model is split as in DecoRemoval (Sec. 3): an extractor (``model``), a
fixed random Fourier feature map (``rff``, Rahimi & Recht 2007), decorrelation
sample weights (``decorrelation``, StableNet, Zhang et al. CVPR 2021) and a
linear head removed from with Newton steps and a certificate (``head``,
Guo et al. ICML 2020, Eq. 2-4). Defaults follow ``notes/method.md``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from simulator.head.config import Accounting
from simulator.scenario._base import (
    MAX_LAYERS,
    MAX_SCALE,
    MAX_WIDTH,
    Iterations,
    Layers,
    NonNegativeScale,
    PositiveIterations,
    PositiveScale,
    Rows,
    Section,
    Width,
    refuse,
)

#: Where the public pool of ``extractor_data: public`` comes from
#: (:mod:`simulator.data.public_sources`, :func:`simulator.runner.federation.public_pool`).
PublicSource = Literal["train_share", "test_share", "digits"]

#: Dependence objectives of the decorrelation weights (:mod:`simulator.features.decorrelation`).
Objective = Literal["paper", "stablenet", "class_conditional"]


class ExtractorDpSpec(Section):
    """DP-SGD of the extractor under ``extractor_data: dp`` (``simulator.models.dp_fedavg``).

    The extractor's ``(epsilon, delta)`` is not a setting: every client's RDP accountant
    computes it over all rounds at ``delta``; these keys fix the mechanism.
    """

    noise_multiplier: PositiveScale = Field(
        default=1.0,
        description="Gaussian noise std over the clipping norm (z of Abadi et al. 2016).",
    )
    max_grad_norm: PositiveScale = Field(
        default=1.0, description="Per-sample gradient clipping norm C."
    )
    delta: float = Field(
        default=1e-5, gt=0, lt=1, description="delta at which the accountants give epsilon."
    )
    extractor_epsilon_limit: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        description="Most the extractor's group charge may reach: k * epsilon_x for the k "
        "rows removed since the extractor was last trained (a vacuous group delta passes "
        "every limit). A batch that would pass it retrains the whole model from scratch on "
        "the retained rows (DP-FedAvg with fresh accountants; retrain reason "
        "extractor_limit; every transport). None: never.",
    )


class ModelSpec(Section):
    """Feature extractor and its federated (FedAvg) training."""

    backbone: Literal["mlp", "lstm", "transformer", "identity"] = Field(
        default="mlp",
        description="Extractor; identity feeds the raw inputs to the RFF map. "
        "lstm/transformer need data.text.representation: tokens.",
    )
    feature_dim: Width = Field(default=64, description="Width of the extractor output h.")
    hidden: list[int] = Field(default=[128], description="Hidden layer widths of the mlp.")
    embed_dim: Width = Field(default=64, description="Token embedding width (lstm/transformer).")
    heads: Layers = Field(default=2, description="Attention heads (transformer).")
    layers: Layers = Field(default=1, description="Recurrent / encoder layers (lstm/transformer).")
    rounds: Iterations = Field(default=3, description="FedAvg rounds training the extractor.")
    local_epochs: PositiveIterations = Field(
        default=1, description="Local epochs per FedAvg round."
    )
    batch_size: Rows = Field(default=64, description="Local minibatch size.")
    lr: PositiveScale = Field(default=1e-3, description="Extractor learning rate.")
    extractor_data: Literal["private", "public", "dp"] = Field(
        default="private",
        description="public: the extractor, the RFF bandwidth and the encoder's statistics "
        "come only from a held-out pool no client holds (certificate scope whole_model); "
        "dp: DP-FedAvg (DP-SGD on every client, model.dp; scope whole_model, the accountants' "
        "epsilon composed with the head's); "
        "private: trained on the clients' data (scope head: NOT certified for the extractor).",
    )
    dp: ExtractorDpSpec = Field(
        default=ExtractorDpSpec(), description="DP-SGD settings (extractor_data: dp)."
    )
    public_fraction: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Share of the training data held out as the public pool "
        "(public_source train_share), or of the test split (test_share).",
    )
    public_source: PublicSource = Field(
        default="train_share",
        description="Where the public pool of extractor_data public comes from. "
        "train_share: a seeded public_fraction share of the training rows, held out of the "
        "federation; test_share: a seeded public_fraction share of the test split, removed "
        "from every evaluation set (the clients keep every training row); digits: "
        "scikit-learn's 8x8 digits of the scenario's classes as 28x28 images (source mnist; "
        "every digit of those classes: public_fraction is not used).",
    )

    @field_validator("hidden")
    @classmethod
    def _positive_widths(cls, hidden: list[int]) -> list[int]:
        if any(width < 1 for width in hidden):
            raise ValueError("widths should be >= 1")
        if any(width > MAX_WIDTH for width in hidden) or len(hidden) > MAX_LAYERS:
            raise ValueError(f"at most {MAX_LAYERS} widths, each at most {MAX_WIDTH}")
        return hidden

    @model_validator(mode="after")
    def _public_source_applies(self) -> ModelSpec:
        if self.public_source != "train_share" and self.extractor_data != "public":
            refuse(
                ("public_source",),
                "applies to extractor_data 'public' (the only provenance with a public "
                f"pool), extractor_data is '{self.extractor_data}'",
                got=self.public_source,
            )
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelSpec:
        if self.backbone == "transformer" and self.embed_dim % self.heads:
            refuse(
                ("heads",),
                f"should divide embed_dim ({self.embed_dim}) for a transformer",
                got=self.heads,
            )
        return self

    @property
    def certified_extractor(self) -> bool:
        """Whether the certificate covers the extractor (a public pool, or DP training)."""
        return self.extractor_data in ("public", "dp")


class RFFSpec(Section):
    """Random Fourier feature map ``u(h) = sqrt(2/m) cos(h Omega + phi)``."""

    dim: Width = Field(default=512, description="Number of random features m.")
    bandwidth: float | Literal["median"] = Field(
        default="median",
        description="Kernel bandwidth sigma (Omega ~ N(0, 1/sigma^2)); "
        "median = median pairwise distance of the features.",
    )

    @field_validator("bandwidth", mode="before")
    @classmethod
    def _number_or_median(cls, value: Any) -> Any:
        if value == "median":
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError("should be a number > 0 or 'median'")
        if not value <= MAX_SCALE:  # also NaN
            raise ValueError(f"should be a number <= {MAX_SCALE:g} or 'median'")
        return value


class DecorrelationSpec(Section):
    """Decorrelation sample weights; used by method decoremoval only.

    Every fit starts from uniform weights with the same seed and schedule, at training and
    after every deletion, so the weights are a function of the retained rows alone (what a
    retrain from scratch would fit; ``docs/decorrelation.md``).
    """

    retired_keys: ClassVar[dict[str, str]] = {
        "warm_steps": "removed: weights are refitted cold (decorrelation.steps from uniform) "
        "after every deletion, never warm-started from weights that saw the deleted rows",
    }

    enabled: bool = Field(default=True, description="Learn decorrelation weights.")
    objective: Objective = Field(
        default="paper",
        description="Dependence minimised: paper = the paper's covariance of the re-weighted "
        "features w_i u(Z_i); stablenet = StableNet's weighted covariance (can collapse the "
        "mass onto one class); class_conditional = the paper's estimator within each class, "
        "class masses fixed.",
    )
    features: Width | None = Field(
        default=64,
        description="Feature columns whose pairwise dependence is penalised "
        "(a fixed random subset; null = all).",
    )
    functions: Layers = Field(default=1, description="Random Fourier functions per column.")
    steps: Iterations = Field(
        default=100, description="Adam steps of every fit (from uniform weights)."
    )
    lr: PositiveScale = Field(default=0.05, description="Learning rate of the weight optimiser.")
    penalty: NonNegativeScale = Field(
        default=0.1, description="Weight of the sum-of-squares penalty on w."
    )
    max_weight: float | None = Field(
        default=None,
        ge=1,
        le=MAX_SCALE,
        description="Cap on every weight (>= 1, the mean); null = no cap.",
    )


class HeadSpec(Section):
    """Certified linear head: L2-regularised logistic regression with loss perturbation."""

    retired_keys: ClassVar[dict[str, str]] = {
        "bound": "renamed to head.accounting: guo (Guo et al.'s data-dependent bound, was "
        "'data'), anchored, worst or exact (docs/certified-head.md)",
    }

    lam: PositiveScale = Field(default=1e-3, description="L2 regularisation lambda (times n).")
    sigma: PositiveScale = Field(default=10.0, description="Std of the perturbation vector b.")
    epsilon: PositiveScale = Field(default=1.0, description="Certificate epsilon.")
    delta: float = Field(default=1e-4, gt=0, lt=1, description="Certificate delta.")
    accounting: Accounting = Field(
        default="anchored",
        description="What is charged to the budget: anchored = the tight bound summed since "
        "the last exact gradient, one exact pass before any retrain (the default); guo = Guo et "
        "al.'s data-dependent bound summed since the last retrain (their accounting); worst = "
        "the worst-case bound (its decision depends on b least: only through ||w||); "
        "exact = the exact residual of the released head after every removal.",
    )
    report_exact: bool | None = Field(
        default=None,
        description="Also compute the exact residual after every removal (a diagnostic: the "
        "events' residual_exact; one gradient round over all clients per batch). Default (null): "
        "on, except on flower-deploy, where that round trip is most of a batch's latency.",
    )
    tol: PositiveScale = Field(
        default=1e-8, description="Gradient-norm tolerance of head training."
    )
    refresh_every: Iterations = Field(
        default=0,
        description="Rebuild the Hessian over the retained rows at the current head every N "
        "deletion batches, moving the reference point there (0 = never; no retrain).",
    )
    rereference_after: Iterations = Field(
        default=0,
        description="The cost of a full Hessian rebuild in exact passes (anchors and correction "
        "steps): once the passes since the last build reach N s / K, the s of the K classes "
        "that hold 80% of the gap to the head's reference point are rebuilt at the released "
        "head. After a purge or a withdrawal moved the head, later removals then need far "
        "fewer exact passes. A full rebuild cost about 240 passes, the two classes that moved "
        "after a class purge 65, at n = 60,000, d = 1,024 on 2 CPU cores "
        "(docs/certified-head.md); 0 = never.",
    )
    correction_steps: Iterations = Field(
        default=8,
        description="Where the exact gradient of a new head is known and its residual is above "
        "the budget (anchored: at an anchor; exact: every removal), take up to N Newton "
        "steps on that gradient, each measured by one exact pass, before retraining (0 = "
        "retrain at once).",
    )
    retrain: Literal["warm", "cold"] = Field(
        default="warm",
        description="Retrain from the current head (warm: L-BFGS preconditioned by the removal "
        "solver's Hessian) or from zero (cold, as the initial training: head.cold_solver); "
        "same optimum and tolerance.",
    )
    cold_solver: Literal["lbfgs", "newton"] = Field(
        default="lbfgs",
        description="How the head is trained from zero (the initial training and cold "
        "retrains): lbfgs (L-BFGS preconditioned by the Hessian at zero, one Hessian build at "
        "the end) or newton (damped Newton, the K Hessians built at every iteration); same "
        "optimum and tolerance.",
    )
    device: Literal["cpu", "cuda", "auto"] = Field(
        default="cpu",
        description="Where the server's head runs: cpu, cuda, or auto (cuda when available).",
    )
    backend: Literal["numpy", "torch", "auto"] = Field(
        default="auto",
        description="Array library of the head: numpy, torch, or auto (torch on cuda, else numpy).",
    )
    client_rows: Literal["auto", "host", "head"] = Field(
        default="auto",
        description="Where in-process clients keep their head rows: host (numpy), head (the "
        "head's backend and device, so statistics and exact passes never leave it), or auto "
        "(head when the head runs on cuda, else host). Flower clients always use host.",
    )

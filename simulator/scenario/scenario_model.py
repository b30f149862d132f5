"""The top-level :class:`Scenario`: one YAML file = one experiment.

Sections are defined in ``data_spec``, ``learning_spec``, ``stream_spec`` and
``conditions_spec``; this module adds the checks that span sections (a target
client must exist, a tokens representation needs a sequence backbone, ...).
Checks that need the loaded data (number of classes) run in
:meth:`Scenario.check_against`, which the runner calls after loading.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from simulator.methods import method, streaming_methods, streaming_problem
from simulator.scenario._base import Checks, Section
from simulator.scenario.conditions_spec import EvaluationSpec, OODSpec, ShiftSpec
from simulator.scenario.data_spec import IMAGE_SOURCES, DataSpec, PartitionSpec
from simulator.scenario.learning_spec import DecorrelationSpec, HeadSpec, ModelSpec, RFFSpec
from simulator.scenario.problems import Problem, ScenarioError
from simulator.scenario.stream_spec import StreamSpec

#: Unlearning methods a scenario may name (:func:`simulator.methods.streaming_methods`). Only
#: ``decoremoval`` uses the ``decorrelation`` section; ``cr`` and ``retrain_head`` ignore it
#: (uniform weights). The paper's baselines that retrain or dampen the whole network run under
#: ``unlearnsim compare`` only.
KNOWN_METHODS: tuple[str, ...] = streaming_methods()
#: Sources whose labels are the digits 0..9 (the ``digits`` shift split is labelled with digits).
DIGIT_SOURCES: tuple[str, ...] = ("mnist", "idx")


class Scenario(Section):
    """A complete, validated experiment description (see ``docs/scenarios.md``)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Identifier (letters, digits, _ . -); names runs and request ids.",
    )
    description: str = Field(default="", description="Free text.")
    seed: int = Field(default=0, ge=0, description="Root seed of every random choice.")
    output_dir: str = Field(
        default="runs/{name}", validate_default=True, description="Run folder; {name} expands."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="Torch device.")
    data: DataSpec = Field(description="Dataset.")
    partition: PartitionSpec = Field(default=PartitionSpec(), description="Client split.")
    model: ModelSpec = Field(default=ModelSpec(), description="Extractor.")
    rff: RFFSpec = Field(default=RFFSpec(), description="Random Fourier features.")
    decorrelation: DecorrelationSpec = Field(
        default=DecorrelationSpec(), description="Decorrelation weights."
    )
    head: HeadSpec = Field(default=HeadSpec(), description="Certified head.")
    method: str = Field(default="decoremoval", description="Unlearning method.")
    stream: StreamSpec = Field(description="Deletion stream.")
    shifts: list[ShiftSpec] = Field(default=[], description="Distribution shifts.")
    ood: OODSpec | None = Field(default=None, description="Label-swap OOD split.")
    evaluation: EvaluationSpec = Field(default=EvaluationSpec(), description="Metric cadence.")
    transport: Literal["inprocess", "flower-sim", "flower-deploy"] = Field(
        default="inprocess", description="How the federation runs."
    )
    bootstrap: str | None = Field(
        default=None, description="Kafka bootstrap servers (source kafka)."
    )
    client_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Threads on which in-process clients answer the head's questions at once "
            "(transport inprocess; results are bit-identical to 1, one client after another)."
        ),
    )

    @field_validator("output_dir")
    @classmethod
    def _expand_name(cls, value: str, info: ValidationInfo) -> str:
        name = info.data.get("name")
        return value.replace("{name}", name) if isinstance(name, str) else value

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        problem = streaming_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        checks = Checks()
        self._check_learner(checks)
        self._check_extractor_limit(checks)
        self._check_public_source(checks)
        if self.client_threads > 1 and self.transport != "inprocess":
            checks.add(
                ("client_threads",),
                "applies to transport 'inprocess' (Flower runs its clients in their own "
                f"processes), transport is '{self.transport}'",
                got=self.client_threads,
            )
        if self.head.client_rows == "head" and self.transport != "inprocess":
            checks.add(
                ("head", "client_rows"),
                "'head' applies to transport 'inprocess' (a Flower client keeps its rows in its "
                f"own process), transport is '{self.transport}'",
                got=self.head.client_rows,
            )
        self._check_stream(checks)
        self._check_audit(checks)
        self._check_shifts(checks)
        self._check_classes(checks, self.data.static_num_classes)
        checks.raise_if_any()
        return self

    def _check_learner(self, checks: Checks) -> None:
        backbone = self.model.backbone
        if backbone in ("lstm", "transformer") and not self.data.uses_tokens:
            checks.add(
                ("model", "backbone"),
                f"'{backbone}' needs data.text.representation 'tokens' (a text source)",
                got=backbone,
            )
        if self.data.uses_tokens and backbone not in ("lstm", "transformer"):
            checks.add(
                ("data", "text", "representation"),
                "'tokens' needs model.backbone lstm or transformer "
                f"(backbone is '{backbone}'; use 'embedding')",
                got="tokens",
            )
        if self.method == "decoremoval" and not self.decorrelation.enabled:
            checks.add(
                ("decorrelation", "enabled"),
                "method 'decoremoval' needs decorrelation enabled "
                "(use method 'cr' for certified removal without it)",
                got=False,
            )

    def _check_extractor_limit(self, checks: Checks) -> None:
        """``model.dp.extractor_epsilon_limit`` needs a DP extractor.

        Only ``extractor_data: dp`` has an extractor charge to limit (every transport
        retrains it mid-stream: a Flower client is sent the rows it keeps).
        """
        if self.model.dp.extractor_epsilon_limit is None:
            return
        where = ("model", "dp", "extractor_epsilon_limit")
        if self.model.extractor_data != "dp":
            msg = "only extractor_data 'dp' has an extractor charge to limit"
            checks.add(where, f"{msg}, extractor_data is '{self.model.extractor_data}'")

    def _check_public_source(self, checks: Checks) -> None:
        """``model.public_source: digits`` needs a digit source and no ``digits`` shift split.

        Other sources' classes are not digits (``digits`` as the source would be its own
        pool); the natural ``digits`` shift split evaluates the very rows the pool is made of.
        """
        if self.model.public_source != "digits":
            return
        where = ("model", "public_source")
        if self.data.source not in DIGIT_SOURCES:
            checks.add(
                where,
                "'digits' (scikit-learn's handwritten digits) is a public pool for a digit "
                f"source ({', '.join(DIGIT_SOURCES)}), source is '{self.data.source}' (use "
                "train_share or test_share)",
                got="digits",
            )
        if any(s.kind == "digits" for s in self.evaluation.shift_splits):
            checks.add(
                where,
                "'digits' would evaluate its own pool: evaluation.shift_splits has a 'digits' "
                "split (the same scikit-learn digits)",
                got="digits",
            )

    def _check_stream(self, checks: Checks) -> None:
        n = self.partition.num_clients
        for i, phase in enumerate(self.stream.phases):
            client = phase.target.client
            if client is not None and client >= n:
                checks.add(
                    ("stream", "phases", i, "target", "client"),
                    f"should be a client index < partition.num_clients ({n})",
                    got=client,
                )
        for i, withdrawal in enumerate(self.stream.withdrawals):
            if withdrawal.client >= n:
                msg = f"should be a client index < partition.num_clients ({n})"
                checks.add(("stream", "withdrawals", i, "client"), msg, got=withdrawal.client)
        if len({w.client for w in self.stream.withdrawals}) >= n:
            checks.add(("stream", "withdrawals"), f"would withdraw all {n} clients")
        kafka = self.stream.source == "kafka"
        if kafka and not self.bootstrap:
            checks.add(("bootstrap",), "stream.source 'kafka' needs bootstrap servers, got nothing")
        if not kafka and self.bootstrap is not None:
            checks.add(("bootstrap",), "only used with stream.source 'kafka'", got=self.bootstrap)

    def _check_audit(self, checks: Checks) -> None:
        """``evaluation.audit`` retrains the extractor here, on the scenario's own stream."""
        if not self.evaluation.audit:
            return
        if self.transport != "inprocess":
            checks.add(
                ("evaluation", "audit"),
                "the membership audit runs on transport 'inprocess' only (it retrains the "
                "extractor in this process on the clients' retained rows, which a Flower client "
                f"keeps in its own process), transport is '{self.transport}'",
            )
        if self.stream.source == "kafka":
            checks.add(
                ("evaluation", "audit"),
                "the membership audit runs on the scenario's own stream, not stream.source "
                "'kafka' (a consumer resumes across sessions)",
            )

    def _check_shifts(self, checks: Checks) -> None:
        for i, shift in enumerate(self.shifts):
            self.stream.check_tick(checks, ("shifts", i, "start"), shift.start)
            if shift.kind == "rotation" and self.data.source not in IMAGE_SOURCES:
                msg = f"'rotation' needs an image source ({', '.join(IMAGE_SOURCES)})"
                checks.add(("shifts", i, "kind"), f"{msg}, source is '{self.data.source}'")
            has_ood = (
                self.ood is not None
                or self.data.classes is not None
                or self.data.source == "synthetic"  # ships its own shifted test set
            )
            if shift.applies_to != "test" and not has_ood:
                msg = "needs an OOD split (set ood or data.classes, or use source synthetic)"
                checks.add(("shifts", i, "applies_to"), msg, got=shift.applies_to)
        for i, split in enumerate(self.evaluation.shift_splits):
            loc = ("evaluation", "shift_splits", i, "kind")
            if split.kind == "digits" and self.data.source not in DIGIT_SOURCES:
                # its rows are labelled with digits: only a source whose labels are digits
                msg = f"'digits' needs a digit source ({', '.join(DIGIT_SOURCES)})"
                checks.add(loc, f"{msg}, source is '{self.data.source}'")
            if split.kind == "remaining" and self.data.classes is None:
                checks.add(loc, "'remaining' needs data.classes (the other labels)")

    def _check_classes(self, checks: Checks, num_classes: int | None) -> None:
        """Class ids must be in ``data.classes`` (when given) or below ``num_classes``."""
        classes = self.data.classes
        if classes is not None:
            allowed, expect = set(classes), f"one of data.classes {classes}"
        elif num_classes is not None:
            allowed, expect = set(range(num_classes)), f"a label < {num_classes}"
        else:
            return
        if classes is not None and num_classes is not None:
            for c in classes:
                if c >= num_classes:
                    checks.add(("data", "classes"), f"labels should be < {num_classes}", got=c)
        self._check_class_ids(checks, allowed, expect)
        self._check_priors(checks, len(classes) if classes is not None else num_classes)

    def _check_class_ids(self, checks: Checks, allowed: set[int], expect: str) -> None:
        """The phases' target class and the OOD classes are in ``allowed``."""
        for i, phase in enumerate(self.stream.phases):
            cid = phase.target.class_id
            if cid is not None and cid not in allowed:
                checks.add(
                    ("stream", "phases", i, "target", "class_id"), f"should be {expect}", got=cid
                )
        if self.ood is not None:
            for key in ("source_class", "target_class"):
                value = getattr(self.ood, key)
                if value not in allowed:
                    checks.add(("ood", key), f"should be {expect}", got=value)

    def _check_priors(self, checks: Checks, n_in: int | None) -> None:
        """Each shift's ``prior`` has one entry per class (``n_in`` of them)."""
        for i, shift in enumerate(self.shifts):
            if shift.prior is not None and len(shift.prior) != n_in:
                checks.add(
                    ("shifts", i, "prior"),
                    f"should have one entry per class ({n_in})",
                    got=shift.prior,
                )

    def check_against(self, num_classes: int | None) -> None:
        """Check the class ids against the loaded data (called by the runner after loading).

        Parameters
        ----------
        num_classes
            Number of distinct labels of the loaded source (labels ``0..num_classes-1``), or
            None when ``data.classes`` selected a subset (its ids are the source's labels,
            which the loader has already checked).

        Raises
        ------
        ScenarioError
            Naming the path of every class id that does not exist.
        """
        checks = Checks()
        self._check_classes(checks, num_classes)
        if checks.problems:
            problems = [Problem(".".join(map(str, loc)), msg) for loc, msg in checks.problems]
            raise ScenarioError(problems)

    @property
    def uses_decorrelation(self) -> bool:
        """Whether the method learns decorrelation weights (decoremoval with it enabled)."""
        return method(self.method).decorrelates and self.decorrelation.enabled

    @property
    def num_ticks(self) -> int:
        """Length of the deletion stream in ticks."""
        return self.stream.total_ticks

"""Build a run from a scenario: data, partition, extractor, features, clients, head, stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data import load_source, partition
from simulator.data.dataset import Dataset
from simulator.data.synthetic import SyntheticSpec
from simulator.errors import ConfigError
from simulator.features.decorrelation import DecorrelationConfig
from simulator.federation import FederatedClient, FederatedHeadData, WeightingPlan
from simulator.head import CertifiedHead, HeadConfig
from simulator.models import resolve_device
from simulator.runner.evaluation import EvaluationSets, build_eval_sets, original_labels
from simulator.runner.featurize import Featurizer, train_featurizer
from simulator.runner.seeds import stage_rng, stage_seed
from simulator.scenario import Scenario
from simulator.stream import DeletionRequest, generate_stream

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass
class Federation:
    """Everything a run needs, built deterministically from the scenario."""

    scenario: Scenario
    dataset: Dataset
    client_indices: list[IntArray]
    public_indices: IntArray
    featurizer: Featurizer
    train_features: FloatArray
    clients: dict[int, FederatedClient]
    head_data: FederatedHeadData
    head: CertifiedHead
    eval_sets: EvaluationSets
    requests: list[DeletionRequest]
    retain_probe: IntArray

    def head_data_retained(self) -> IntArray:
        """Global ids of every retained row."""
        return np.concatenate([c.retained_ids for c in self.clients.values()])

    @property
    def extractor_certified(self) -> bool:
        """Only an extractor trained on never-deleted public data keeps the certificate."""
        return self.scenario.model.extractor_data == "public"


def load_dataset(scenario: Scenario) -> Dataset:
    """Load the scenario's source and check class ids against it."""
    d = scenario.data
    synthetic = None
    if d.synthetic is not None:
        synthetic = SyntheticSpec(**d.synthetic.model_dump())
    text = d.text
    ds = load_source(
        d.source,
        rng=stage_rng(scenario.seed, "data"),
        path=d.path,
        label_column=d.label_column,
        classes=d.classes,
        max_train=d.max_train,
        max_test=d.max_test,
        test_fraction=d.test_fraction,
        text_representation=text.representation if text else "embedding",
        max_len=text.max_len if text else 48,
        vocab_size=text.vocab_size if text else 5000,
        synthetic=synthetic,
    )
    scenario.check_against(None if d.classes is not None else ds.num_classes)
    return ds


def split_clients(scenario: Scenario, ds: Dataset) -> tuple[list[IntArray], IntArray]:
    """Client shards (global row ids) and, for a public extractor, the public pool."""
    n = ds.y_train.shape[0]
    ids = np.arange(n, dtype=np.int64)
    public = np.zeros(0, dtype=np.int64)
    if scenario.model.extractor_data == "public":
        rng = stage_rng(scenario.seed, "public")
        k = int(round(scenario.model.public_fraction * n))
        public = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
        ids = np.setdiff1d(ids, public)
    p = scenario.partition
    flat = ds.x_train[ids].reshape(len(ids), -1) if p.kind == "covariate" else None
    parts = partition(
        ds.y_train[ids],
        num_clients=p.num_clients,
        kind=p.kind,
        rng=stage_rng(scenario.seed, "partition"),
        alpha=p.alpha,
        features=None if flat is None else np.asarray(flat, dtype=np.float64),
    )
    return [ids[part] for part in parts], public


def build_federation(
    scenario: Scenario, *, extractor_progress: Callable[[int, float], None] | None = None
) -> Federation:
    """Everything before the first deletion: the trained model and the generated stream."""
    if scenario.transport != "inprocess":
        raise ConfigError(
            f"transport '{scenario.transport}' needs the Flower adapters; this runner is the "
            "in-process transport (use transport: inprocess)",
            "transport",
        )
    if scenario.stream.source != "scenario":
        raise ConfigError(
            "stream source 'kafka' is consumed by the Kafka adapter, not the in-process runner",
            "stream.source",
        )
    ds = load_dataset(scenario)
    shards, public = split_clients(scenario, ds)
    device = resolve_device(scenario.device)
    pools: list[tuple[NDArray[Any], NDArray[Any]]]
    if scenario.model.extractor_data == "public":
        pools = [(ds.x_train[public], ds.y_train[public])]
    else:
        pools = [(ds.x_train[s], ds.y_train[s]) for s in shards]
    featurizer = train_featurizer(scenario, ds, pools, device=device, progress=extractor_progress)
    Z = featurizer(ds.x_train)

    weighting = None
    if scenario.method == "decoremoval":
        dc = scenario.decorrelation
        config = DecorrelationConfig(
            features=dc.features,
            functions=dc.functions,
            steps=dc.steps,
            warm_steps=dc.warm_steps,
            lr=dc.lr,
            penalty=dc.penalty,
        )
        weighting = config
    clients: dict[int, FederatedClient] = {}
    owner: dict[int, int] = {}
    for c, rows in enumerate(shards):
        plan = None
        if weighting is not None:
            seed = int(np.random.SeedSequence([stage_seed(scenario.seed, "decorrelation"), c]).generate_state(1)[0])
            plan = WeightingPlan(weighting, seed)
        clients[c] = FederatedClient(c, rows, Z[rows], ds.y_train[rows], ds.num_classes, weighting=plan)
        owner.update({int(i): c for i in rows})
    head_data = FederatedHeadData(clients, owner, dim=Z.shape[1], num_classes=ds.num_classes)
    h = scenario.head
    head = CertifiedHead(
        head_data,
        HeadConfig(
            lam=h.lam,
            sigma=h.sigma,
            epsilon=h.epsilon,
            delta=h.delta,
            bound=h.bound,
            tol=h.tol,
            refresh_every=h.refresh_every,
        ),
        rng=stage_rng(scenario.seed, "head"),
    )
    eval_sets = build_eval_sets(scenario, ds, featurizer, stage_rng(scenario.seed, "ood"))
    labels = np.asarray(original_labels(ds.class_names), dtype=np.int64)[ds.y_train]
    requests = generate_stream(
        scenario.stream,
        client_indices=shards,
        labels=labels,
        scenario_name=scenario.name,
        rng=stage_rng(scenario.seed, "stream"),
    )
    all_client = np.sort(np.concatenate(shards))
    probe_rng = stage_rng(scenario.seed, "evaluation")
    probe = np.sort(probe_rng.choice(all_client, size=min(2000, all_client.size), replace=False))
    return Federation(
        scenario, ds, shards, public, featurizer, Z, clients, head_data, head, eval_sets,
        requests, probe.astype(np.int64),
    )

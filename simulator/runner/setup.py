"""Build a run from a scenario: data, partition, extractor, features, clients, head, stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from simulator.data import load_source, partition
from simulator.data.dataset import Dataset
from simulator.data.synthetic import SyntheticSpec
from simulator.errors import ConfigError
from simulator.federation import ClientReport, FederatedHeadData
from simulator.head import CertifiedHead
from simulator.models import resolve_device
from simulator.runner.configs import head_config
from simulator.runner.evaluation import EvaluationSets, build_eval_sets, original_labels
from simulator.runner.featurize import Featurizer, LocalRound, in_process_round, train_featurizer
from simulator.runner.seeds import stage_rng
from simulator.runner.transport import ClientTransport, InProcessTransport, RunnerClient
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
    clients: dict[int, RunnerClient]
    head_data: FederatedHeadData
    head: CertifiedHead
    eval_sets: EvaluationSets
    requests: list[DeletionRequest]
    retain_probe: IntArray
    transport: ClientTransport | None = None
    #: clients that failed and left the federation, with the reason
    excluded: dict[int, str] = field(default_factory=dict)

    def head_data_retained(self) -> IntArray:
        """Global ids of every retained row."""
        parts = [c.retained_ids for c in self.clients.values()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def exclude(self, client_id: int, reason: str) -> None:
        """A client failed: it leaves the federation (the caller retrains the head)."""
        self.clients.pop(client_id, None)
        self.head_data.exclude(client_id, reason)
        self.excluded[client_id] = reason
        if self.transport is not None:
            self.transport.exclude(client_id)

    def client_reports(self) -> dict[int, ClientReport]:
        """Every live client's own report at the current head (one round trip)."""
        if self.transport is None:
            return {}
        return self.transport.reports(self.head.W, sorted(self.clients))

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
        k = round(scenario.model.public_fraction * n)
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
    scenario: Scenario,
    *,
    transport: ClientTransport | None = None,
    extractor_progress: Callable[[int, float], None] | None = None,
) -> Federation:
    """Everything before the first deletion: the trained model and the generated stream.

    ``transport`` reaches the clients (default: :class:`InProcessTransport`, only for
    ``transport: inprocess``; the Flower ServerApp passes its own). The server side (data for
    evaluation, extractor averaging, RFF map, head, stream) is the same for every transport.
    """
    if transport is None and scenario.transport != "inprocess":
        raise ConfigError(
            f"transport '{scenario.transport}' runs through Flower: use "
            f"`unlearnsim run SCENARIO --transport {scenario.transport}`",
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
    if transport is None:
        transport = InProcessTransport(scenario, ds, shards, device=device)
    local_round: LocalRound
    if scenario.model.extractor_data == "public":
        # the public pool never leaves the server: it trains as the only FedAvg "client"
        pool = ds.x_train[public]
        local_round = in_process_round(scenario, ds, [(pool, ds.y_train[public])], device=device)
    else:
        pool = ds.x_train[np.concatenate(shards)]
        local_round = transport.local_round
    featurizer = train_featurizer(
        scenario, ds, pool, local_round=local_round, device=device, progress=extractor_progress
    )
    Z = featurizer(ds.x_train)  # the simulator's evaluation view (forget/retain splits)
    clients = transport.open_clients(featurizer, shards)
    owner = {int(i): c for c, rows in enumerate(shards) for i in rows}
    head_data = FederatedHeadData(
        clients, owner, dim=Z.shape[1], num_classes=ds.num_classes, fanout=transport.fanout
    )
    head = CertifiedHead(
        head_data,
        head_config(scenario),
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
        scenario,
        ds,
        shards,
        public,
        featurizer,
        Z,
        clients,
        head_data,
        head,
        eval_sets,
        requests,
        probe.astype(np.int64),
        transport=transport,
    )

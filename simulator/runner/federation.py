"""Build a run from a scenario: data, partition, extractor, features, clients, head, stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from simulator.data import load_source, partition
from simulator.data.dataset import Dataset
from simulator.data.public_sources import digits_pool, share_of_test_split
from simulator.data.raw import PublicRows
from simulator.errors import ConfigError, InputError
from simulator.federation import ClientReport, FederatedHeadData
from simulator.head import CertifiedHead
from simulator.head.scope import CertificateScope, ExtractorGuarantee, certificate_scope
from simulator.models import resolve_device
from simulator.models.dp_fedavg import ClientAccountants
from simulator.models.featurizer import Featurizer
from simulator.models.fedavg import LocalRound
from simulator.runner.configs import head_config
from simulator.runner.evaluation import EvaluationSets, build_eval_sets
from simulator.runner.extractor_refit import generation_scenario
from simulator.runner.featurize import in_process_round, train_featurizer
from simulator.runner.transport import ClientTransport, InProcessTransport, RunnerClient
from simulator.scenario import Scenario
from simulator.seeds import child_rng
from simulator.stream import DeletionRequest, generate_stream

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class FederationData:
    """What the build fixes and no deletion changes: data, splits, features, the stream.

    Attributes
    ----------
    scenario : the validated scenario.
    dataset : the loaded rows (train, test, OOD).
    client_indices : each client's global row ids.
    public_indices : the public pool (extractor trained on it), or empty.
    featurizer : the trained extractor and RFF map.
    train_features : head features of every training row (the server's evaluation view).
    eval_sets : the evaluation splits and shifts.
    requests : the deletion stream generated from the scenario.
    retain_probe : retained rows sampled for the retain-split metrics.
    extractor_guarantee : under ``extractor_data: dp`` the extractor's per-row
        ``(epsilon_x, delta_x)`` from the clients' accountants (:func:`dp_guarantee`); None
        for the provenances with a fixed part (``public``, ``private``).
    extractor_epsilons : every client's accounted epsilon at ``delta_x`` (``dp``; else empty).
    """

    scenario: Scenario
    dataset: Dataset
    client_indices: list[IntArray]
    public_indices: IntArray
    featurizer: Featurizer
    train_features: FloatArray
    eval_sets: EvaluationSets
    requests: list[DeletionRequest]
    retain_probe: IntArray
    extractor_guarantee: ExtractorGuarantee | None = None
    extractor_epsilons: dict[int, float] = field(default_factory=dict)


T = TypeVar("T")


class _FromData(Generic[T]):
    """A read-only attribute of a :class:`Federation` that is the same field of its ``data``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, fed: None, owner: type) -> _FromData[T]: ...

    @overload
    def __get__(self, fed: Federation, owner: type | None = None) -> T: ...

    def __get__(self, fed: Federation | None, owner: type | None = None) -> T | _FromData[T]:
        if fed is None:
            return self
        value: T = getattr(fed.data, self.name)
        return value

    def __set__(self, fed: Federation, value: T) -> None:
        raise AttributeError(f"{self.name} is part of the federation's fixed data")


#: Version of :meth:`Federation.state_dict`'s layout (2: the extractor's generation).
STATE_VERSION = 2


@dataclass
class ExtractorRecord:
    """What the extractor has seen: its generation and the rows removed since it was trained.

    Attributes
    ----------
    generation : 0 for the extractor of the build; +1 at each retrain from scratch on the
        retained rows (``model.dp.extractor_epsilon_limit``).
    rows_since : rows removed from the federation since this extractor was trained (the group
        ``k`` of its part of the certificate, :mod:`simulator.head.scope`).
    trained_on : each live client's rows this extractor was trained on (None: the build's
        shards); what a saved state replays it from.
    """

    generation: int = 0
    rows_since: int = 0
    trained_on: dict[int, IntArray] | None = None

    def state_dict(self) -> dict[str, Any]:
        """Plain data (the rows as int64 arrays)."""
        shards = self.trained_on or {}
        return {
            "generation": self.generation,
            "rows_since": self.rows_since,
            "trained_on": {str(c): np.asarray(r, dtype=np.int64) for c, r in shards.items()},
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> ExtractorRecord:
        """The record :meth:`state_dict` wrote (None, a version-1 state: generation 0)."""
        if state is None:
            return cls()
        generation = int(state["generation"])
        shards = {int(c): np.asarray(r, dtype=np.int64) for c, r in state["trained_on"].items()}
        return cls(generation, int(state["rows_since"]), shards if generation else None)


class Federation:
    """A built federation: its fixed :class:`FederationData` and the state deletions change.

    The mutable part is the certified ``head`` (over ``head_data``, which reaches the
    ``clients``), the clients themselves (retained rows, weights) and the clients ``excluded``
    after failing; :meth:`state_dict` / :meth:`load_state_dict` save and restore exactly that,
    as versioned plain data (a checkpoint writes it; the data is rebuilt from the scenario).
    The data's fields read as the federation's own (``fed.scenario`` is ``fed.data.scenario``).
    """

    def __init__(
        self,
        data: FederationData,
        clients: dict[int, RunnerClient],
        head_data: FederatedHeadData,
        head: CertifiedHead,
        *,
        transport: ClientTransport | None = None,
    ) -> None:
        self.data = data
        self.clients = clients
        self.head_data = head_data
        self.head = head
        self.transport = transport
        #: clients that failed and left the federation, with the reason
        self.excluded: dict[int, str] = {}
        #: the extractor's generation and the rows removed since it was trained
        self.extractor = ExtractorRecord()

    scenario = _FromData[Scenario]()
    dataset = _FromData[Dataset]()
    client_indices = _FromData[list[IntArray]]()
    public_indices = _FromData[IntArray]()
    featurizer = _FromData[Featurizer]()
    train_features = _FromData[FloatArray]()
    eval_sets = _FromData[EvaluationSets]()
    requests = _FromData[list[DeletionRequest]]()
    retain_probe = _FromData[IntArray]()
    extractor_guarantee = _FromData[ExtractorGuarantee | None]()

    def head_data_retained(self) -> IntArray:
        """Global ids of every retained row."""
        parts = [c.retained_ids for c in self.clients.values()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def exclude(self, client_id: int, reason: str) -> None:
        """A client failed: it leaves the federation (the caller retrains the head).

        Its retained rows leave ``D'`` too: the extractor read them, so they join the rows
        removed since it was trained.
        """
        leaving = self.clients.pop(client_id, None)
        if leaving is not None:
            self.extractor.rows_since += len(leaving.retained_ids)
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
        """Whether the certificate covers the extractor: a public pool, or DP-SGD (``dp``)."""
        return self.scenario.model.certified_extractor

    def certificate_scope(
        self, head_epsilon: float, *, rows: int | None = None
    ) -> CertificateScope:
        """What a head certificate of ``head_epsilon`` covers, and the whole model's total.

        ``rows``: the group ``k`` of the extractor's part; default: every row removed since
        the extractor was trained (``extractor.rows_since``): the released model is compared
        with one trained from scratch without all of them, so a DP extractor's group epsilon
        grows with them. Under ``extractor_data: dp`` the extractor's part is its
        accountants' guarantee.
        """
        return certificate_scope(
            self.scenario.model.extractor_data,
            head_epsilon,
            self.scenario.head.delta,
            rows=self.extractor.rows_since if rows is None else rows,
            extractor=self.extractor_guarantee,
        )

    def scope_fields(self, head_epsilon: float) -> dict[str, Any]:
        """An event's scope keys (the totals None under scope ``head``).

        ``scope``, ``extractor_data``, ``total_epsilon_spent`` and ``total_delta`` (over the
        rows removed since the extractor was trained), ``total_epsilon_target`` (the head's
        target and one row), ``scope_uncovered`` and ``scope_reason`` (why the whole model is
        not covered and which setting would cover it: ``none`` and None when it is); under
        ``extractor_data: dp`` also the extractor's own per-row
        ``extractor_epsilon`` / ``extractor_delta``, each client's epsilon
        (``extractor_client_epsilons``), ``extractor_rows`` (the group ``k``) and
        ``extractor_generation``.
        """
        spent = self.certificate_scope(head_epsilon)
        target = self.certificate_scope(self.scenario.head.epsilon, rows=1)
        fields: dict[str, Any] = {
            "scope": spent.scope,
            "extractor_data": spent.extractor_data,
            "total_epsilon_spent": spent.total_epsilon,
            "total_epsilon_target": target.total_epsilon,
            "total_delta": spent.total_delta,
            "scope_uncovered": spent.uncovered,
            "scope_reason": spent.reason,
        }
        part = self.extractor_guarantee
        if part is not None:
            fields["extractor_epsilon"] = part.epsilon
            fields["extractor_delta"] = part.delta
            fields["extractor_client_epsilons"] = {
                str(c): e for c, e in sorted(self.data.extractor_epsilons.items())
            }
            fields["extractor_rows"] = self.extractor.rows_since
            fields["extractor_generation"] = self.extractor.generation
        return fields

    # ------------------------------------------------------- extractor retrain
    def retrain_extractor(self, trained_on: dict[int, IntArray], generation: int) -> None:
        """Train the DP extractor of ``generation`` from scratch on ``trained_on`` and rebuild.

        Everything downstream of the extractor is rebuilt from it, as at the build: the RFF
        map, the training rows' features and the evaluation sets on the server, and every
        live client's head rows and weights (new clients holding ``trained_on``); the head
        now reads them but is not retrained here (the caller does,
        :mod:`simulator.runner.extractor_limit`). The clients' accountants start empty
        (:mod:`simulator.runner.extractor_refit`), and no removed row is charged any more.

        On every transport: the FedAvg rounds go through it
        (:meth:`~simulator.runner.transport.ClientTransport.generation_round`), a Flower
        client training on the retained rows the server sends and keeping only those at
        its setup. In process this is
        :func:`~simulator.runner.extractor_refit.train_dp_generation` (the audit's retrained
        model).

        Raises
        ------
        ConfigError
            Not ``extractor_data: dp``, or no transport (a federation restored as a record).
        """
        sc, ds = self.scenario, self.dataset
        transport = self.transport
        if sc.model.extractor_data != "dp" or transport is None:
            raise ConfigError(
                "the extractor is retrained mid-stream only under extractor_data dp, through "
                "the transport that reaches the clients",
                "model.dp.extractor_epsilon_limit",
            )
        device = resolve_device(sc.device)
        accountants = ClientAccountants()  # the new generation's own, empty
        transport.accountants = accountants
        featurizer = train_featurizer(
            generation_scenario(sc, generation),
            ds,
            ds.x_test,  # the bandwidth on rows no client holds, as at the build
            local_round=transport.generation_round(generation, trained_on),
            device=device,
        )
        empty = np.zeros(0, dtype=np.int64)
        shards = [trained_on.get(c, empty) for c in range(len(self.client_indices))]
        opened = transport.open_clients(featurizer, shards, retained=True)
        for cid in self.excluded:
            transport.exclude(cid)
        self.clients = {c: client for c, client in opened.items() if c not in self.excluded}
        self.head_data = FederatedHeadData(
            self.clients,
            client_owner(self.client_indices),
            dim=self.head_data.dim,
            num_classes=ds.num_classes,
            fanout=transport.fanout,
            rows_backend=transport.rows_backend,
        )
        self.head.data = self.head_data
        self.data = replace(
            self.data,
            featurizer=featurizer,
            train_features=featurizer(ds.x_train),
            eval_sets=build_eval_sets(sc, ds, featurizer, child_rng(sc.seed, "ood")),
            extractor_guarantee=dp_guarantee(sc, accountants),
            extractor_epsilons=accountants.epsilons(sc.model.dp.delta),
        )
        self.extractor = ExtractorRecord(generation, 0, dict(trained_on))

    # ------------------------------------------------------------- save/load
    def state_dict(self, *, host: bool = True) -> dict[str, Any]:
        """The mutable state as plain data: the head, every live client, the excluded ones.

        A client in another process (a Flower transport) is saved as what the server knows of
        it (its retained rows); such a state is a record, not something to resume from (a
        Flower run's clients start from their full shards: :meth:`load_state_dict` refuses it).
        ``host=False``: the head's large arrays stay on its device
        (:meth:`~simulator.head.CertifiedHead.state_dict`).
        """
        clients: dict[str, Any] = {}
        for cid, client in sorted(self.clients.items()):
            if isinstance(client, Stateful):
                clients[str(cid)] = client.state_dict()
            else:
                clients[str(cid)] = {
                    "remote": type(client).__name__,
                    "retained_ids": np.asarray(client.retained_ids, dtype=np.int64),
                }
        return {
            "version": STATE_VERSION,
            "head": self.head.state_dict(host=host),
            "clients": clients,
            "excluded": {str(c): r for c, r in sorted(self.excluded.items())},
            "extractor": self.extractor.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install a :meth:`state_dict` into this federation, built from the same scenario.

        A state saved after the extractor was retrained (generation > 0) replays that
        retrain first (:meth:`retrain_extractor` on the saved rows: the same generation's
        seed gives the same extractor), then installs the clients and the head.

        Raises
        ------
        InputError
            Another layout version, or clients that do not match.
        """
        version = int(state.get("version", 0))
        if not 1 <= version <= STATE_VERSION:
            raise InputError(f"federation state version {version} is not 1..{STATE_VERSION}")
        for cid, reason in state["excluded"].items():
            if int(cid) not in self.excluded:
                self.exclude(int(cid), str(reason))
        record = ExtractorRecord.from_state_dict(state.get("extractor"))
        if record.generation != self.extractor.generation and record.trained_on is not None:
            self.retrain_extractor(record.trained_on, record.generation)
        self.extractor = record
        saved = {int(c) for c in state["clients"]}
        if saved != set(self.clients):
            raise InputError(f"saved clients {sorted(saved)} != live {sorted(self.clients)}")
        for cid, client in self.clients.items():
            saved_client = state["clients"][str(cid)]
            if "remote" in saved_client or not isinstance(client, Stateful):
                raise InputError(
                    f"client {cid} lives in another process: a saved state of it cannot be "
                    "restored here (resuming is the in-process transport's)"
                )
            client.load_state_dict(saved_client)
        self.head.load_state_dict(state["head"])


@runtime_checkable
class Stateful(Protocol):
    """A client whose state this process holds (:class:`~simulator.federation.FederatedClient`)."""

    def state_dict(self) -> dict[str, Any]:
        """The client's state (what a checkpoint saves)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        ...


def public_pool(scenario: Scenario, n: int) -> IntArray:
    """The ``train_share`` public pool among ``n`` training rows (else empty).

    Under ``extractor_data: public`` with ``model.public_source: train_share``, a seeded
    ``model.public_fraction`` share of the rows, drawn before any client gets a row: the
    extractor, the RFF bandwidth and the encoder's statistics are fitted on it alone, and no
    client ever holds one of its rows (:func:`check_public_pool`). The other sources' pools
    come with the dataset (:func:`public_rows_source`, ``Dataset.public_rows``).
    """
    model = scenario.model
    if model.extractor_data != "public" or model.public_source != "train_share":
        return np.zeros(0, dtype=np.int64)
    rng = child_rng(scenario.seed, "public")
    k = round(scenario.model.public_fraction * n)
    return np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)


def public_rows_source(scenario: Scenario) -> PublicRows | None:
    """The pool of a declared source other than the training rows (``model.public_source``).

    ``test_share``: a seeded ``model.public_fraction`` share of the test split, which leaves
    it; ``digits``: scikit-learn's digits as MNIST images (:mod:`simulator.data.public_sources`).
    None for ``train_share`` (:func:`public_pool`) and without ``extractor_data: public``.
    """
    model = scenario.model
    if model.extractor_data != "public" or model.public_source == "train_share":
        return None
    if model.public_source == "digits":
        return digits_pool
    rng = child_rng(scenario.seed, "public")
    return partial(share_of_test_split, fraction=model.public_fraction, rng=rng)


def pool_of(scenario: Scenario, ds: Dataset) -> IntArray:
    """The public pool's training row ids: the dataset's own, or the ``train_share`` draw."""
    if ds.public_rows is not None:
        return ds.public_rows
    return public_pool(scenario, ds.n_train)


def check_public_pool(public: IntArray, shards: list[IntArray]) -> None:
    """Refuse a public pool that shares a row with a client (the certificate would not cover it).

    Raises
    ------
    ConfigError
        Some client holds a row of the pool; the message names the client and the rows.
    """
    if public.size == 0:
        return
    for client, rows in enumerate(shards):
        shared = np.intersect1d(public, rows)
        if shared.size:
            raise ConfigError(
                f"the public pool shares {shared.size} row(s) with client {client} (e.g. row "
                f"{int(shared[0])}): an extractor fitted on it would have read that client's "
                "data, so the certificate could not cover the whole model",
                "model.extractor_data",
            )


#: Sources whose encoder fits statistics on the training rows (a table's medians, means and
#: categories, a text vocabulary): no DP mechanism covers them (``extractor_data: dp``).
FITTED_ENCODER_SOURCES: tuple[str, ...] = (
    "rotten_tomatoes",
    "sst2",
    "gss_happiness",
    "adult",
    "csv",
)


def check_dp_extractor(scenario: Scenario, transport: ClientTransport | None) -> None:
    """Refuse what ``extractor_data: dp`` cannot cover or run.

    Raises
    ------
    ConfigError
        A source whose encoder fits statistics on the clients' rows (not DP: the whole-model
        certificate would not hold), or a transport that keeps no accountant across rounds.
    """
    if scenario.model.extractor_data != "dp":
        return
    if scenario.data.source in FITTED_ENCODER_SOURCES:
        raise ConfigError(
            f"extractor_data dp: the {scenario.data.source} encoder fits its statistics on "
            "the clients' rows without noise, so the certificate could not cover the whole "
            "model; use extractor_data public (the encoder fits on the pool) for this source",
            "model.extractor_data",
        )
    if transport is not None and getattr(transport, "accountants", None) is None:
        raise ConfigError(
            f"extractor_data dp: transport {transport.name} keeps no DP accountant per client "
            "across rounds",
            "model.extractor_data",
        )


def dp_guarantee(scenario: Scenario, accountants: ClientAccountants) -> ExtractorGuarantee:
    """The DP extractor's per-row ``(epsilon_x, delta_x)``: the max over clients.

    A row lives on one client and only that client's DP-SGD reads it (FedAvg is
    post-processing), so the extractor is ``(max_c epsilon_c, delta)``-DP per row
    (:mod:`simulator.models.dp_fedavg`).
    """
    delta = scenario.model.dp.delta
    return ExtractorGuarantee(accountants.max_epsilon(delta), delta)


def client_owner(shards: list[IntArray]) -> dict[int, int]:
    """Global sample id -> the client whose shard holds it (deleted rows included)."""
    return {int(i): c for c, rows in enumerate(shards) for i in rows}


def extractor_stage(
    scenario: Scenario,
    ds: Dataset,
    shards: list[IntArray],
    public: IntArray,
    clients_round: LocalRound,
) -> tuple[NDArray[Any], LocalRound]:
    """The RFF bandwidth's pool and the FedAvg round that train the extractor.

    By ``model.extractor_data``. ``public``: the public pool trains as the only FedAvg
    "client" (it never leaves the server). ``dp``: the clients' round (``clients_round``,
    DP-SGD), the bandwidth fitted on rows no client holds (a client's row, read without noise,
    would leave the accountants' guarantee). ``private``: the clients' round, the bandwidth on
    their rows.
    """
    provenance = scenario.model.extractor_data
    if provenance == "public":
        pool = ds.x_train[public]
        device = resolve_device(scenario.device)
        return pool, in_process_round(scenario, ds, [(pool, ds.y_train[public])], device=device)
    if provenance == "dp":
        return ds.x_test, clients_round
    return ds.x_train[np.concatenate(shards)], clients_round


def load_dataset(scenario: Scenario) -> Dataset:
    """Load the scenario's source and check class ids against it.

    Under ``extractor_data: public`` the source's encoder (standardisation, one-hot
    categories, vocabulary) is fitted on the public pool's rows only (:func:`public_pool`, or
    a declared source's pool appended to the training rows: :func:`public_rows_source`).
    """
    model = scenario.model
    train_share = model.extractor_data == "public" and model.public_source == "train_share"
    ds = load_source(
        scenario.data,
        rng=child_rng(scenario.seed, "data"),
        fit_rows=partial(public_pool, scenario) if train_share else None,
        public_rows=public_rows_source(scenario),
    )
    scenario.check_against(None if scenario.data.classes is not None else ds.num_classes)
    return ds


def split_clients(scenario: Scenario, ds: Dataset) -> tuple[list[IntArray], IntArray]:
    """Client shards (global row ids) and, for a public extractor, the public pool."""
    n = ds.y_train.shape[0]
    public = pool_of(scenario, ds)
    ids = np.setdiff1d(np.arange(n, dtype=np.int64), public)
    spec = scenario.partition
    flat = ds.x_train[ids].reshape(len(ids), -1) if spec.kind == "covariate" else None
    parts = partition(
        ds.y_train[ids],
        spec,
        rng=child_rng(scenario.seed, "partition"),
        features=None if flat is None else np.asarray(flat, dtype=np.float64),
    )
    shards = [ids[part] for part in parts]
    check_public_pool(public, shards)
    return shards, public


def deletion_stream(
    scenario: Scenario, ds: Dataset, shards: list[IntArray]
) -> list[DeletionRequest]:
    """The scenario's generated deletion requests over the client ``shards`` of ``ds``.

    Class targets name source labels, which the generator maps through ``ds.class_labels``.
    """
    return generate_stream(
        scenario.stream,
        client_indices=shards,
        labels=ds.y_train,
        class_labels=ds.class_labels,
        scenario_name=scenario.name,
        rng=child_rng(scenario.seed, "stream"),
    )


def build_federation(
    scenario: Scenario,
    *,
    transport: ClientTransport | None = None,
    extractor_progress: Callable[[int, float], None] | None = None,
    stage: Callable[[str], None] | None = None,
) -> Federation:
    """Everything before the first deletion: the trained model and the generated stream.

    ``transport`` reaches the clients (default: :class:`InProcessTransport`, only for
    ``transport: inprocess``; the Flower ServerApp passes its own). The server side (data for
    evaluation, extractor averaging, RFF map, head, stream) is the same for every transport.
    ``stage`` is told each stage as it starts (``loading the data``, ``training the
    extractor``, ``fitting the clients' weights and training the head``, ``building the
    evaluation sets``); ``extractor_progress`` each FedAvg round as it ends.
    """
    told = stage or (lambda name: None)
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
    check_dp_extractor(scenario, transport)
    told("loading the data")
    ds = load_dataset(scenario)
    shards, public = split_clients(scenario, ds)
    requests = deletion_stream(scenario, ds, shards)  # before training: its errors come first
    device = resolve_device(scenario.device)
    provenance = scenario.model.extractor_data
    accountants: ClientAccountants | None = None
    if provenance == "dp":  # one per client, kept across every round (check_dp_extractor)
        accountants = getattr(transport, "accountants", None) or ClientAccountants()
    if transport is None:
        transport = InProcessTransport(scenario, ds, shards, device=device, accountants=accountants)
    pool, local_round = extractor_stage(scenario, ds, shards, public, transport.local_round)
    told("training the extractor")
    featurizer = train_featurizer(
        scenario, ds, pool, local_round=local_round, device=device, progress=extractor_progress
    )
    Z = featurizer(ds.x_train)  # the simulator's evaluation view (forget/retain splits)
    told("fitting the clients' weights and training the head")
    clients = transport.open_clients(featurizer, shards)
    head_data = FederatedHeadData(
        clients,
        client_owner(shards),
        dim=Z.shape[1],
        num_classes=ds.num_classes,
        fanout=transport.fanout,
        rows_backend=transport.rows_backend,
    )
    head = CertifiedHead(
        head_data,
        head_config(scenario),
        rng=child_rng(scenario.seed, "head"),
    )
    told("building the evaluation sets")
    eval_sets = build_eval_sets(scenario, ds, featurizer, child_rng(scenario.seed, "ood"))
    all_client = np.sort(np.concatenate(shards))
    probe_rng = child_rng(scenario.seed, "evaluation")
    probe = np.sort(probe_rng.choice(all_client, size=min(2000, all_client.size), replace=False))
    data = FederationData(
        scenario,
        ds,
        shards,
        public,
        featurizer,
        Z,
        eval_sets,
        requests,
        probe.astype(np.int64),
        extractor_guarantee=None if accountants is None else dp_guarantee(scenario, accountants),
        extractor_epsilons={}
        if accountants is None
        else accountants.epsilons(scenario.model.dp.delta),
    )
    return Federation(data, clients, head_data, head, transport=transport)

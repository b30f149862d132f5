"""The one registry of unlearning methods, for ``unlearnsim run`` and ``unlearnsim compare``.

A :class:`Method` says what a method does under both commands:

* ``removal``: how the federated streaming run (scenario stream, Kafka, Flower) removes a batch
  from the server's certified head: ``certified`` (one certified Newton step, a retrain when the
  budget would be exceeded; Guo et al. 2020, DecoRemoval Algorithm 1) or ``retrain_head`` (the
  head retrained from scratch on the retained rows, no residual charged). ``None``: the method
  changes the whole network and runs under ``compare`` only;
* ``unlearner``: the :class:`~simulator.unlearners.base.BaseUnlearner` class ``compare`` trains
  (imported on first use, so reading a scenario never imports torch).

Names say what a method retrains: ``retrain_head`` retrains the linear head only (the
federation's exact baseline); ``retrain`` retrains the extractor, the RFF map and the head
(``compare``'s reference). ``register_method`` adds user methods (``register_unlearner`` in
:mod:`simulator.unlearners.registry` is the shorthand for a compare-only class).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from simulator.errors import ConfigError

if TYPE_CHECKING:
    from simulator.head import CertifiedHead, RemovalReport

Removal = Literal["certified", "retrain_head"]


@dataclass(frozen=True)
class Method:
    """One unlearning method (see the module docstring).

    Attributes
    ----------
    name : the scenario's ``method`` and ``compare --methods`` name.
    summary : what it does, one line.
    removal : how the streaming run removes a batch from the head, or None (compare only).
    unlearner : ``"module:Class"`` or the class itself, for ``compare``; None: run only.
    decorrelates : whether its head's loss uses decorrelation weights.
    federated : whether the federated streaming run implements it (``decoremoval_extractor``
        removes from its head like ``decoremoval``, but only ``compare`` trains its extractor
        with the weights).
    """

    name: str
    summary: str
    removal: Removal | None
    unlearner: str | type[Any] | None
    decorrelates: bool = False
    federated: bool = True

    @property
    def streams(self) -> bool:
        """Whether ``unlearnsim run`` can apply it to the federation's head."""
        return self.removal is not None and self.federated

    def remove(self, head: CertifiedHead, ids: Sequence[int]) -> RemovalReport:
        """Remove ``ids`` from ``head`` as this method does (module docstring).

        Raises
        ------
        ConfigError
            The method has no head removal (it runs under ``compare`` only).
        """
        if self.removal is None:
            raise ConfigError(
                f"method {self.name!r} runs under `unlearnsim compare` only", "method"
            )
        return head.remove(ids, retrain=self.removal == "retrain_head")

    def unlearner_class(self) -> type[Any]:
        """The ``compare`` class (imported now when given as ``module:Class``)."""
        if self.unlearner is None:
            raise ConfigError(
                f"method {self.name!r} has no compare implementation; compare takes "
                f"{', '.join(compare_methods())}",
                "methods",
            )
        if isinstance(self.unlearner, str):
            module, _, attr = self.unlearner.partition(":")
            cls: type[Any] = getattr(importlib.import_module(module), attr)
            return cls
        return self.unlearner


_UNLEARNERS = "simulator.unlearners"
_REGISTRY: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "retrain",
            "extractor, RFF map and head retrained from scratch on the retained rows",
            None,
            f"{_UNLEARNERS}.retrain:Retrain",
        ),
        Method(
            "cr",
            "certified removal of the linear head, uniform weights (Guo et al. 2020)",
            "certified",
            f"{_UNLEARNERS}.cr:CertifiedRemoval",
        ),
        Method("sisa", "shards x slices with checkpoints", None, f"{_UNLEARNERS}.sisa:Sisa"),
        Method("dpsgd", "DP-SGD training, removal a no-op", None, f"{_UNLEARNERS}.dpsgd:DpSgd"),
        Method("ssd", "selective synaptic dampening", None, f"{_UNLEARNERS}.ssd:Ssd"),
        Method(
            "cu",
            "certified unlearning for DNNs (LiSSA Newton step + noise)",
            None,
            f"{_UNLEARNERS}.cu:CertifiedUnlearning",
        ),
        Method(
            "decoremoval",
            "RFF + decorrelation weights + certified removal of the head (DecoRemoval)",
            "certified",
            f"{_UNLEARNERS}.decoremoval:DecoRemoval",
            decorrelates=True,
        ),
        Method(
            "decoremoval_extractor",
            "DecoRemoval with the decorrelation weights also re-weighting the extractor's "
            "training loss (refitted every epoch); the certificate covers the head only",
            "certified",
            f"{_UNLEARNERS}.decoremoval:DecoRemovalExtractor",
            decorrelates=True,
            federated=False,
        ),
        Method(
            "retrain_head",
            "linear head retrained from scratch on the retained rows (frozen extractor + RFF)",
            "retrain_head",
            f"{_UNLEARNERS}.retrain_head:RetrainHead",
        ),
    )
}

#: Old method names of the streaming run and what replaced them.
RENAMED = {
    "retrain": "in `unlearnsim run`, 'retrain' meant the head only: it is now 'retrain_head' "
    "('retrain' retrains extractor, RFF map and head, and runs under `unlearnsim compare`)"
}


def register_method(method: Method, *, force: bool = False) -> None:
    """Add ``method`` to the registry.

    Raises
    ------
    ConfigError
        The name is not letters, digits and ``_``, or is taken (and ``force`` is False).
    """
    name = method.name
    if not name or not name.replace("_", "").isalnum():
        raise ConfigError(f"a method name is letters, digits and _, got {name!r}", "method")
    current = _REGISTRY.get(name)
    if current is not None and current != method and not force:
        raise ConfigError(
            f"{name!r} is already registered ({current.summary}); pass force=True to replace it",
            "method",
        )
    _REGISTRY[name] = method


def unregister_method(name: str) -> None:
    """Remove ``name`` from the registry (no error when it is not there)."""
    _REGISTRY.pop(name, None)


def method(name: str) -> Method:
    """The method registered under ``name``.

    Raises
    ------
    ConfigError
        No method has that name.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown method {name!r}; registered: {', '.join(_REGISTRY)}", "method"
        ) from None


def methods() -> tuple[Method, ...]:
    """Every registered method, in registration order."""
    return tuple(_REGISTRY.values())


def streaming_methods() -> tuple[str, ...]:
    """Names ``unlearnsim run`` takes."""
    return tuple(m.name for m in _REGISTRY.values() if m.streams)


def compare_methods() -> tuple[str, ...]:
    """Names ``unlearnsim compare`` takes."""
    return tuple(m.name for m in _REGISTRY.values() if m.unlearner is not None)


def streaming_problem(name: str) -> str | None:
    """Why a scenario cannot name ``name`` for the streaming run (None: it can)."""
    if name in RENAMED and (name not in _REGISTRY or not _REGISTRY[name].streams):
        return RENAMED[name]
    found = _REGISTRY.get(name)
    if found is None:
        return f"should be one of {', '.join(streaming_methods())}"
    if not found.streams:
        return (
            f"{name!r} runs under `unlearnsim compare run SCENARIO --methods {name},...`; a "
            f"streaming run takes one of {', '.join(streaming_methods())}"
        )
    return None


def streaming_method(name: str) -> Method:
    """The method a scenario names, checked for the streaming run.

    Raises
    ------
    ConfigError
        Unknown, renamed, or compare-only, with what to use instead.
    """
    problem = streaming_problem(name)
    if problem is not None:
        raise ConfigError(problem, "method")
    return _REGISTRY[name]

"""Fast restart: the federation as built is saved once per state folder and reloaded, not rebuilt.

Building a federation trains the extractor (FedAvg), fits the random features, every client's
decorrelation weights and the head: seconds to minutes. A restarted consumer needs none of it
again. The first start writes ``federation.pkl`` next to the checkpoint: the whole
:class:`~simulator.runner.federation.Federation` (extractor and random-feature map, every client's
feature rows, labels, ids and weights, the initial head, the evaluation sets), with a header
holding the scenario's digest and a digest of the data it was built from. A restart loads the
scenario's data (cheap: no training), checks its digest against the header, and unpickles the
federation; the checkpoint then installs the head, weights, ledger and offsets it saved.

A different scenario, or data whose digest differs (a changed data file, another version of a
source), refuses to resume with :class:`~server.kafka.errors.CheckpointError`: the checkpointed
head was fitted to the old rows. Only the in-process transport is saved this way (a Flower
federation's clients are processes of their own).

The file is a pickle and only a cache: one written by another version of the code (another
format, or classes that changed since) is rebuilt, and the checkpoint (versioned state dicts,
:mod:`server.kafka.checkpoint`) is installed on top as usual. Load state folders you trust
only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import time
from pathlib import Path

import numpy as np

from server.kafka.errors import CheckpointError
from simulator.data.dataset import Dataset
from simulator.runner.federation import Federation, FederationData, build_federation, load_dataset
from simulator.scenario import Scenario

#: 2: :class:`Federation` split into fixed data and mutable state.
FORMAT = 2
NAME = "federation.pkl"
log = logging.getLogger(__name__)


def dataset_digest(ds: Dataset) -> str:
    """Digest of every array and name a federation is built from (train, test, OOD rows)."""
    h = hashlib.sha256()
    h.update(repr((ds.name, ds.num_classes, ds.modality, tuple(ds.class_names))).encode())
    for name in ("x_train", "y_train", "x_test", "y_test", "ood_x", "ood_y"):
        arr = getattr(ds, name, None)
        h.update(name.encode())
        if arr is None:
            h.update(b"none")
            continue
        arr = np.ascontiguousarray(arr)
        h.update(str((arr.dtype.str, arr.shape)).encode())
        h.update(arr.data)
    return h.hexdigest()


def scenario_digest(scenario: Scenario) -> str:
    """Digest of the scenario with its overrides (the checkpoint's own check uses the same)."""
    return hashlib.sha256(scenario.model_dump_json().encode()).hexdigest()


def save_federation(folder: Path, fed: Federation, *, fsync: bool = True) -> float:
    """Write ``fed`` (just built, before any deletion) to ``folder``; returns seconds taken."""
    t = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    header = {
        "format": FORMAT,
        "scenario": scenario_digest(fed.scenario),
        "data": dataset_digest(fed.dataset),
    }
    tmp = folder / (NAME + ".tmp")
    with tmp.open("wb") as f:
        pickle.dump(header, f, protocol=5)
        pickle.dump(fed, f, protocol=5)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, folder / NAME)
    return time.perf_counter() - t


def load_federation(folder: Path, scenario: Scenario) -> Federation | None:
    """The federation saved in ``folder`` for ``scenario`` (None: nothing saved yet).

    Raises
    ------
    CheckpointError
        It was saved for another scenario, or the scenario's data changed since.
    """
    path = folder / NAME
    if not path.exists():
        return None
    with path.open("rb") as f:
        header = pickle.load(f)
        if header.get("format") != FORMAT:  # a cache of another version: rebuild it
            log.warning("%s has format %s, not %s: rebuilding", path, header.get("format"), FORMAT)
            return None
        if header["scenario"] != scenario_digest(scenario):
            raise CheckpointError(
                f"{path} belongs to another scenario (or other overrides); use another state "
                "folder or delete it to start over"
            )
        digest = dataset_digest(load_dataset(scenario))
        if header["data"] != digest:
            raise CheckpointError(
                f"{path}: the scenario's data changed since the federation was built (data "
                f"digest {digest[:16]}..., saved {header['data'][:16]}...); refusing to resume "
                "a head fitted to other rows: restore the data, or delete the state folder to "
                "start over"
            )
        try:
            fed = pickle.load(f)
        except Exception as exc:  # a class renamed or moved since: the cache is stale
            log.warning("%s no longer loads (%s): rebuilding", path, exc)
            return None
    if not isinstance(fed, Federation) or not isinstance(
        getattr(fed, "data", None), FederationData
    ):
        log.warning("%s holds a federation of an earlier layout: rebuilding", path)
        return None
    return fed


def federation_for(
    scenario: Scenario, folder: Path, *, fsync: bool = True
) -> tuple[Federation, bool]:
    """Load the saved federation of ``folder`` or build and save a new one.

    The saved federation of ``folder``, else one built now (and saved); and whether it
    was reloaded.
    """
    fed = load_federation(folder, scenario)
    if fed is not None:
        return fed, True
    fed = build_federation(scenario)
    save_federation(folder, fed, fsync=fsync)
    return fed, False

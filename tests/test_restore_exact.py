"""A restored federation continues exactly as the one it was saved from, bit for bit.

The checkpoint's promise (``server/kafka/checkpoint.py``): a restart loads a snapshot and applies
the journaled batches again, and every journaled fingerprint matches. That holds only when the
saved state holds every value the next batch reads, as it is in memory: a value that is folded,
recomputed or re-derived on load (the Gram matrix's pending rows folded into its base, the
Woodbury capacitance inverted afresh instead of bordered) changes the last bits of the next
charge, and a restart then refuses the journal.

Each case runs a stream without interruption, taking the state after every batch as the
background snapshot does (``state_dict(host=False)``, written to disk only after the next
batches ran), then restores each of those states into a fresh federation, applies the rest of
the stream and compares the whole state after every batch with the uninterrupted run's. The
cases cover, between them, Woodbury rows and Gram rows pending at a snapshot, bulk rows,
correction steps with secant pairs, exact passes (anchors), a budget retrain, the Hessian
rebuilt at a moved reference point (``head.rereference_after``), DecoRemoval's re-weighting,
and the torch head.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.scenarios import LARGE, scenario

from server.kafka.producer import scenario_requests
from simulator.runner.federation import Federation, build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.state_files import host_arrays, read_state, write_state
from simulator.state_files import state_digest as digest_of
from simulator.stream.ledger import Ledger

#: The benchmark's shape of stream on a small head (d = 64): a tight budget makes every batch
#: of 100 an exact pass, most of them with correction steps, and one a budget retrain.
TIGHT = [*LARGE, "head.epsilon=0.05"]
#: Batches a snapshot is taken before it is written (the background writer's lag).
LAG = 2


@dataclass(frozen=True)
class Case:
    overrides: list[str]
    batch: int
    batches: int
    #: what the stream must exercise at some snapshot or batch (else the case proves little)
    needs: tuple[str, ...] = field(default=())


CASES = {
    "cr-bulk-corrections": Case(
        [*TIGHT, "method=cr"], 100, 22, ("bulk", "corrections", "pairs", "retrain", "gram")
    ),
    "cr-woodbury": Case(["method=cr"], 4, 30, ("woodbury", "gram", "anchored")),
    "decoremoval": Case([*LARGE, "head.epsilon=0.2"], 100, 22, ("corrections", "retrain")),
    "rereference": Case(
        [*TIGHT, "method=cr", "head.rereference_after=3"], 100, 16, ("rebuilt", "corrections")
    ),
    "torch": Case(
        [*TIGHT, "method=cr", "head.backend=torch"], 100, 12, ("bulk", "corrections", "pairs")
    ),
}


def state_digest(fed: Federation) -> str:
    """A digest of the federation's whole saved state (every array bit for bit)."""
    return digest_of(fed.state_dict())


def exercised(fed: Federation, report: Any) -> set[str]:
    """Which of the head's paths the state after a batch (or its report) shows."""
    head = fed.head
    solver, seen = head._solver, set()
    seen |= {"bulk"} if solver.bulk_rows else set()
    seen |= {"woodbury"} if solver._rows.shape[0] else set()
    seen |= {"gram"} if head._gram._rows.shape[0] else set()
    seen |= {"pairs"} if head._pairs else set()
    if report is not None:
        seen |= {"corrections"} if report.corrections else set()
        seen |= {"anchored"} if report.anchored else set()
        seen |= {"retrain"} if report.retrain_reason == "budget" else set()
        seen |= {"rebuilt"} if "rereference" in report.timings else set()
    return seen


@dataclass
class Stream:
    """The uninterrupted run: the state digest after each batch and the saved states."""

    initial: Federation
    digests: list[str]
    saved: dict[int, tuple[Path, RunState, dict[str, Any]]]
    seen: set[str]


def run(
    fed: Federation, case: Case, run_state: RunState, ledger: dict[str, Any], start: int
) -> Iterator[tuple[int, Any]]:
    requests = scenario_requests(fed.scenario)
    for i in range(start, case.batches):
        chunk = requests[i * case.batch : (i + 1) * case.batch]
        yield i, apply_batch(fed, run_state, chunk, ledger=Ledger(ledger)).report


def stream(case: Case, folder: Path) -> Stream:
    initial = build_federation(scenario(case.overrides))
    fed = copy.deepcopy(initial)
    run_state, ledger = RunState(evaluate=False), {}
    digests, seen, saved = [], set(), {}
    taken: dict[int, tuple[dict[str, Any], RunState, dict[str, Any]]] = {}
    for i, report in run(fed, case, run_state, ledger, 0):
        digests.append(state_digest(fed))
        seen |= exercised(fed, report)
        # as the background snapshot: arrays lent now, written after later batches ran
        taken[i] = (fed.state_dict(host=False), copy.deepcopy(run_state), dict(ledger))
        for k in [k for k in taken if k <= i - LAG]:
            state, run_k, ledger_k = taken.pop(k)
            path = folder / f"after-{k}.npz"
            write_state(path, host_arrays({"federation": state}), fsync=False)
            saved[k] = (path, run_k, ledger_k)
    return Stream(initial, digests, saved, seen)


@pytest.mark.parametrize("name", list(CASES))
def test_a_restored_federation_continues_bit_for_bit(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    reference = stream(case, tmp_path)
    assert set(case.needs) <= reference.seen, f"the stream did not exercise {case.needs}"
    assert reference.saved
    for k, (path, run_state, ledger) in sorted(reference.saved.items()):
        fed = copy.deepcopy(reference.initial)
        fed.load_state_dict(read_state(path)["federation"])
        assert state_digest(fed) == reference.digests[k], f"restoring the state after batch {k}"
        for i, _ in run(fed, case, copy.deepcopy(run_state), dict(ledger), k + 1):
            assert state_digest(fed) == reference.digests[i], (
                f"restored after batch {k}, the federation differs after batch {i}"
            )


def test_a_deep_copy_continues_bit_for_bit() -> None:
    """Pickling (the fast-restart cache, ``copy.deepcopy``) keeps pending rows as they are."""
    case = CASES["cr-woodbury"]
    fed = build_federation(scenario(case.overrides))
    run_state, ledger = RunState(evaluate=False), {}
    for i, _ in run(fed, case, run_state, ledger, 0):
        if i == 4:
            copied, copied_run, copied_ledger = (
                copy.deepcopy(fed), copy.deepcopy(run_state), dict(ledger),
            )  # fmt: skip
        if i == 8:
            break
    for _ in run(copied, dataclasses.replace(case, batches=9), copied_run, copied_ledger, 5):
        pass
    assert state_digest(copied) == state_digest(fed)

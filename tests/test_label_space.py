"""One label space: every scenario class id is the source's own label, on every source.

Fashion-MNIST names its classes with words ("T-shirt/top", "Shirt"), so nothing can be guessed
from the names: label 6 is "Shirt" because the IDX files say so. ``data.classes`` in a
non-identity order makes a class id differ from its class index.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.cli import main
from simulator.data.dataset import Dataset
from simulator.data.images import FASHION_MNIST_DIR
from simulator.data.labels import class_index
from simulator.errors import ConfigError, InputError
from simulator.runner.evaluation import build_eval_sets, shift_splits
from simulator.runner.federation import deletion_stream, load_dataset, split_clients
from simulator.scenario import Scenario, parse_scenario
from simulator.seeds import child_rng

needs_fashion = pytest.mark.skipif(
    not FASHION_MNIST_DIR.is_dir(), reason="apt-get install dataset-fashion-mnist"
)

#: Fashion-MNIST's own label of each class name (the IDX files' label values).
FASHION = {"T-shirt/top": 0, "Trouser": 1, "Pullover": 2, "Shirt": 6, "Sneaker": 7}


def scenario(data: str, target: int, *overrides: str) -> Scenario:
    text = f"""\
name: labels
data: {data}
partition: {{kind: iid, num_clients: 2}}
stream:
  phases:
    - name: by_class
      ticks: 2
      rate: 0
      burst: {{every: 1, size: 5}}
      target: {{kind: class, class_id: {target}}}
evaluation:
  shift_splits:
    - {{name: remaining, kind: remaining}}
"""
    return parse_scenario(text, overrides=list(overrides))


def deleted_rows(sc: Scenario) -> tuple[Dataset, list[int]]:
    ds = load_dataset(sc)
    shards, _ = split_clients(sc, ds)
    requests = deletion_stream(sc, ds, shards)
    return ds, [i for r in requests for i in r.sample_ids or []]


FASHION_4 = "{source: fashion_mnist, classes: [7, 0, 6, 2], max_train: 400, max_test: 200}"


@needs_fashion
@pytest.mark.parametrize(("class_id", "name"), [(6, "Shirt"), (2, "Pullover"), (0, "T-shirt/top")])
def test_a_class_target_deletes_the_rows_of_that_source_label(class_id: int, name: str) -> None:
    ds, rows = deleted_rows(scenario(FASHION_4, class_id))
    assert ds.class_labels == (7, 0, 6, 2)
    assert len(rows) == 10  # every asked-for request was generated
    assert {ds.class_names[ds.y_train[i]] for i in rows} == {name}
    assert {ds.class_labels[ds.y_train[i]] for i in rows} == {FASHION[name]}


@needs_fashion
def test_the_label_swap_stays_in_the_tasks_labels_four_classes() -> None:
    sc = scenario(
        FASHION_4,
        6,
        "ood.kind=label_swap",
        "ood.source_class=2",
        "ood.target_class=6",
        "ood.fraction=0.5",
    )
    ds = load_dataset(sc)
    swap = build_eval_sets(sc, ds, lambda x: x, child_rng(0, "ood")).base["ood"]
    assert set(np.unique(swap.y).tolist()) <= {0, 1, 2, 3}
    changed = np.flatnonzero(swap.y != ds.y_test)
    pullovers = int(np.sum(ds.y_test == ds.class_names.index("Pullover")))
    assert changed.size == round(0.5 * pullovers) > 0
    assert {ds.class_names[c] for c in ds.y_test[changed]} == {"Pullover"}
    assert {ds.class_names[c] for c in swap.y[changed]} == {"Shirt"}


@needs_fashion
def test_the_label_swap_of_the_fashion_pair_is_binary() -> None:
    # scenarios/compare_fashion_pair.yaml: classes [0, 6], T-shirts presented as shirts
    data = "{source: fashion_mnist, classes: [0, 6], max_train: 200, max_test: 200}"
    sc = scenario(data, 6, "ood.source_class=0", "ood.target_class=6")
    ds = load_dataset(sc)
    swap = build_eval_sets(sc, ds, lambda x: x, child_rng(0, "ood")).base["ood"]
    assert set(np.unique(swap.y).tolist()) == {0, 1}
    changed = np.flatnonzero(swap.y != ds.y_test)
    assert changed.size == 10  # 10% of the 100 test T-shirts
    assert set(ds.y_test[changed].tolist()) == {0} and set(swap.y[changed].tolist()) == {1}


@needs_fashion
def test_remaining_holds_the_other_source_labels() -> None:
    sc = scenario(FASHION_4, 6)
    ds = load_dataset(sc)
    test = build_eval_sets(sc, ds, lambda x: x, child_rng(0, "ood")).base["test"]
    remaining = shift_splits(sc, ds, test)["remaining"]
    assert set(np.unique(remaining.y).tolist()) <= {1, 3, 4, 5, 8, 9}


DIGITS = "{source: digits, classes: [8, 3], max_train: 300}"


def test_a_digit_source_uses_the_same_label_space() -> None:
    sc = scenario(DIGITS, 3, "ood.source_class=8", "ood.target_class=3")
    ds, rows = deleted_rows(sc)
    assert ds.class_labels == (8, 3) and ds.class_names == ("8", "3")
    assert len(rows) == 10 and {ds.class_names[ds.y_train[i]] for i in rows} == {"3"}
    swap = build_eval_sets(sc, ds, lambda x: x, child_rng(0, "ood")).base["ood"]
    changed = np.flatnonzero(swap.y != ds.y_test)
    assert changed.size > 0 and set(swap.y.tolist()) <= {0, 1}
    assert {ds.class_names[c] for c in ds.y_test[changed]} == {"8"}
    assert {ds.class_names[c] for c in swap.y[changed]} == {"3"}


def test_a_phase_that_generates_no_request_is_refused_naming_it() -> None:
    text = """\
name: empty_phase
data: {source: digits, classes: [3, 8], max_train: 60}
partition: {kind: iid, num_clients: 2}
stream:
  phases:
    - {name: all_threes, ticks: 1, rate: 0, burst: {every: 1, size: 200},
       target: {kind: class, class_id: 3}}
    - {name: more_threes, ticks: 3, rate: 5, target: {kind: class, class_id: 3}}
"""
    sc = parse_scenario(text)
    ds = load_dataset(sc)
    shards, _ = split_clients(sc, ds)
    with pytest.raises(ConfigError, match=r"stream\.phases\.1: phase 'more_threes' generated no"):
        deletion_stream(sc, ds, shards)


def test_an_unknown_class_id_is_refused_not_passed_through() -> None:
    assert class_index((7, 0, 6, 2), 6, "k") == 2
    with pytest.raises(ConfigError, match=r"ood\.target_class: class id 1 is not one of"):
        class_index((7, 0, 6, 2), 1, "ood.target_class")


@pytest.mark.parametrize("labels", [(0,), (0, 0), (0, -1)])
def test_a_dataset_names_one_distinct_source_label_per_class(labels: tuple[int, ...]) -> None:
    x, y = np.zeros((2, 1), dtype=np.float32), np.array([0, 1], dtype=np.int64)
    with pytest.raises(InputError, match="class_labels"):
        Dataset("t", x, y, x, y, 2, "tabular", ("a", "b"), labels)


def test_validate_refuses_a_class_id_the_source_does_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ndata: {source: fashion_mnist}\nstream:\n  phases:\n"
        "    - {name: a, ticks: 1, rate: 1, target: {kind: class, class_id: 12}}\n",
        encoding="utf-8",
    )
    assert main(["validate", "--schema-only", str(path)]) == 2
    assert capsys.readouterr().out.strip() == (
        f"error {path}:5: stream.phases.0.target.class_id: should be a label < 10, got 12"
    )

"""Cross-field rules of the scenario models and the hooks the runner uses."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import yaml

from simulator.scenario import KNOWN_METHODS, Scenario, ScenarioError, parse_scenario


def scenario(**sections: Any) -> Scenario:
    raw: dict[str, Any] = {
        "name": "t",
        "data": {"source": "synthetic"},
        "stream": {"phases": [{"name": "a", "ticks": 4, "rate": 1}]},
    }
    raw.update(sections)
    return parse_scenario(yaml.safe_dump(raw))


def problem_paths(**sections: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        scenario(**sections)
    return [p.path for p in info.value.problems]


def test_a_short_yaml_gets_every_default() -> None:
    s = scenario()
    assert s.partition.num_clients == 5
    assert s.model.backbone == "mlp" and s.model.hidden == [128]
    assert s.rff.bandwidth == "median"
    assert s.head.delta == pytest.approx(1e-4)
    assert s.method == "decoremoval" and s.uses_decorrelation
    assert s.output_dir == "runs/t"
    assert s.data.synthetic is not None and s.data.synthetic.n_features == 20
    assert s.data.text is None


def test_integers_are_accepted_where_numbers_are_expected() -> None:
    s = scenario(head={"lam": 1, "sigma": 3}, rff={"bandwidth": 2})
    assert s.head.lam == 1.0 and isinstance(s.head.lam, float)
    assert s.rff.bandwidth == 2


def test_models_are_frozen() -> None:
    s = scenario()
    with pytest.raises(pydantic.ValidationError):
        s.seed = 3  # type: ignore[misc]


def test_text_sources_get_text_settings() -> None:
    s = scenario(data={"source": "rotten_tomatoes"})
    assert s.data.text is not None and s.data.text.representation == "embedding"
    assert s.data.synthetic is None


def test_tokens_work_with_sequence_backbones() -> None:
    text = {"source": "sst2", "path": "glue/sst2", "text": {"representation": "tokens"}}
    s = scenario(data=text, model={"backbone": "transformer", "embed_dim": 32, "heads": 4})
    assert s.data.uses_tokens
    assert problem_paths(data=text, model={"backbone": "transformer", "heads": 3}) == [
        "model.heads"
    ]


def test_methods() -> None:
    assert set(KNOWN_METHODS) == {"decoremoval", "cr", "retrain_head"}
    # cr and retrain_head ignore the decorrelation section, whatever it says.
    for method in ("cr", "retrain_head"):
        for enabled in (True, False):
            s = scenario(method=method, decorrelation={"enabled": enabled})
            assert not s.uses_decorrelation


def test_streaming_method_names_say_what_they_retrain() -> None:
    """'retrain' was the head-only baseline of `run`: it is refused with its new name, and the
    compare-only methods are refused with the command that runs them."""
    with pytest.raises(ScenarioError, match="retrain_head"):
        scenario(method="retrain")
    with pytest.raises(ScenarioError, match="unlearnsim compare"):
        scenario(method="sisa")
    with pytest.raises(ScenarioError, match="should be one of"):
        scenario(method="nope")


def test_kafka_needs_bootstrap_and_only_kafka_takes_one() -> None:
    stream = {"source": "kafka", "phases": [{"name": "a", "ticks": 1, "rate": 0}]}
    assert scenario(stream=stream, bootstrap="localhost:9092").bootstrap == "localhost:9092"
    assert problem_paths(bootstrap="localhost:9092") == ["bootstrap"]


def test_withdrawals_must_exist_and_leave_someone() -> None:
    phases = [{"name": "a", "ticks": 10, "rate": 1}]
    every = [{"client": c, "at": c} for c in range(2)]
    assert problem_paths(
        partition={"num_clients": 2}, stream={"phases": phases, "withdrawals": every}
    ) == ["stream.withdrawals"]
    twice = [{"client": 1, "at": 1}, {"client": 1, "at": 2}]
    assert problem_paths(stream={"phases": phases, "withdrawals": twice}) == [
        "stream.withdrawals.1.client"
    ]
    far = [{"client": 9, "at": 1}]
    assert problem_paths(stream={"phases": phases, "withdrawals": far}) == [
        "stream.withdrawals.0.client"
    ]


def test_phase_names_are_unique() -> None:
    phases = [{"name": "a", "ticks": 1, "rate": 1}, {"name": "a", "ticks": 1, "rate": 1}]
    assert problem_paths(stream={"phases": phases}) == ["stream.phases.1.name"]


def test_target_fields_must_match_the_kind() -> None:
    phase = {"name": "a", "ticks": 1, "rate": 1, "target": {"kind": "random", "client": 1}}
    assert problem_paths(stream={"phases": [phase]}) == ["stream.phases.0.target.client"]


def test_shift_rules() -> None:
    noise = {"kind": "gaussian_noise", "start": 1, "severity": 0.3}
    assert scenario(shifts=[noise]).shifts[0].applies_to == "test"
    # synthetic data ships its own shifted (OOD) set; digits has none unless ood is set
    assert scenario(shifts=[{**noise, "applies_to": "ood"}]).shifts[0].applies_to == "ood"
    assert problem_paths(data={"source": "digits"}, shifts=[{**noise, "applies_to": "ood"}]) == [
        "shifts.0.applies_to"
    ]
    assert problem_paths(shifts=[{**noise, "start": 4}]) == ["shifts.0.start"]
    assert problem_paths(shifts=[{**noise, "prior": [0.5, 0.5]}]) == ["shifts.0.prior"]
    prior = {"kind": "class_prior", "start": 0, "prior": [0.2, 0.3, 0.5]}
    assert problem_paths(shifts=[prior]) == ["shifts.0.prior"]  # synthetic has 2 classes
    ood = {"source_class": 0, "target_class": 1}
    assert scenario(shifts=[{**noise, "applies_to": "both"}], ood=ood).ood is not None


def test_check_against_the_loaded_number_of_classes() -> None:
    target = {"kind": "class", "class_id": 9}
    s = scenario(
        data={"source": "digits"},
        stream={"phases": [{"name": "a", "ticks": 2, "rate": 1, "target": target}]},
        ood={"source_class": 8, "target_class": 1},
        shifts=[{"kind": "class_prior", "start": 0, "prior": [0.1] * 10}],
    )
    s.check_against(num_classes=10)
    with pytest.raises(ScenarioError) as info:
        s.check_against(num_classes=8)
    paths = [p.path for p in info.value.problems]
    assert paths == ["stream.phases.0.target.class_id", "ood.source_class", "shifts.0.prior"]
    assert "should be a label < 8, got 9" in str(info.value)


def test_check_against_with_a_class_subset() -> None:
    s = scenario(data={"source": "mnist", "classes": [3, 8]})
    s.check_against(num_classes=10)
    with pytest.raises(ScenarioError, match=r"data\.classes: labels should be < 5, got 8"):
        s.check_against(num_classes=5)


def test_stream_clock() -> None:
    phases = [{"name": "a", "ticks": 2, "rate": 1}, {"name": "b", "ticks": 3, "rate": 0}]
    s = scenario(stream={"phases": phases})
    assert s.num_ticks == 5
    assert s.stream.phase_starts() == [0, 2]
    assert [s.stream.phase_at(t).name for t in range(5)] == ["a", "a", "b", "b", "b"]
    with pytest.raises(IndexError):
        s.stream.phase_at(5)


def test_names_are_identifiers() -> None:
    assert problem_paths(name="has space") == ["name"]
    assert scenario(name="ok-name_1.2", output_dir="out/{name}/x").output_dir == "out/ok-name_1.2/x"

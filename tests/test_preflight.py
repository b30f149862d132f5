"""Pre-flight checks: data files, optional packages, the memory estimate, the output folder, the
metrics port and the Kafka broker, each refused before any training with one line naming the
key or option (real sockets and files; nothing is mocked)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from server.cli import main, report_error
from server.preflight import check_broker, check_output, check_port
from simulator.errors import ConfigError
from simulator.scenario import ScenarioError, load_scenario, parse_scenario
from simulator.scenario.preflight import available_memory, estimate, human_bytes, preflight

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
GiB = 2**30


def scenario(*overrides: str):  # type: ignore[no-untyped-def]
    return load_scenario(QUICKSTART, overrides)


def test_every_shipped_scenario_passes_preflight_here() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        report = preflight(load_scenario(path), source=str(path))
        assert 0 < report.estimate.nbytes < 4 * GiB, path
        assert "memory ~" in report.summary() and "time ~" in report.summary()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("data.synthetic.n_train=100000000", "data.synthetic.n_train"),
        ("data.synthetic.n_test=500000000", "data.synthetic.n_test"),
        ("rff.dim=1000000", "rff.dim"),
        ("data.synthetic.n_classes=100000", "data.synthetic.n_classes"),
        ("model.hidden=[1000000, 1000000]", "model.hidden"),
    ],
)
def test_memory_that_cannot_fit_is_refused_naming_the_key(override: str, key: str) -> None:
    s = scenario(override)
    with pytest.raises(ScenarioError) as info:
        preflight(s, source="q.yaml", available=16 * GiB)
    (problem,) = info.value.problems
    assert problem.path == key
    text = str(info.value)
    assert text.startswith(f"q.yaml: {key}: the run needs about ")
    assert "16.0 GiB available" in text and "\n" not in text


def test_the_estimate_grows_with_the_sizes_and_is_quick() -> None:
    small, big = scenario(), scenario("rff.dim=4096")
    assert estimate(big).nbytes > 10 * estimate(small).nbytes
    assert estimate(big).seconds > estimate(small).seconds
    start = time.monotonic()
    estimate(scenario("rff.dim=10000000", "data.synthetic.n_train=1000000000"))
    assert time.monotonic() - start < 0.5
    assert human_bytes(1536) == "1.5 KiB"
    available = available_memory()
    assert available is None or available > 0


def test_missing_data_files_are_named_before_loading(tmp_path: Path) -> None:
    text = f"""
name: files
data: {{source: csv, path: {tmp_path / "nope.csv"}, label_column: y}}
stream: {{phases: [{{name: a, ticks: 2, rate: 1}}]}}
"""
    with pytest.raises(ScenarioError) as info:
        preflight(parse_scenario(text), source="f.yaml")
    assert [p.path for p in info.value.problems] == ["data.path"]
    assert "no such file or folder" in str(info.value)
    fashion = parse_scenario(
        f"name: f\ndata: {{source: fashion_mnist, path: {tmp_path / 'missing'}}}\n"
        "stream: {phases: [{name: a, ticks: 2, rate: 1}]}\n"
    )
    with pytest.raises(ScenarioError, match=r"data\.path: no such file"):
        preflight(fashion)


def test_validate_prints_the_estimate_and_checks_this_machine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", str(QUICKSTART)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ok    {QUICKSTART}  (memory ~") and "available" in out
    assert main(["validate", str(QUICKSTART), "--set", "rff.dim=2000000"]) == 2
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"error {QUICKSTART}: rff.dim: the run needs about ")
    assert main(["validate", "--schema-only", str(QUICKSTART), "--set", "rff.dim=2000000"]) == 0
    assert capsys.readouterr().out.strip() == f"ok    {QUICKSTART}"


def test_run_refuses_a_busy_metrics_port_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError, match="already in use"):
            check_port(port, "127.0.0.1")
        assert main(["run", str(QUICKSTART), "--metrics-port", str(port), "--no-plots"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"error: --metrics-port: port {port} on 127.0.0.1 is already in use; "
        "choose another (0: any free port)"
    )
    check_port(0, "127.0.0.1")


def test_run_refuses_an_output_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("hello")
    assert main(["run", str(QUICKSTART), "--output", str(readme)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: --output: {readme} is a file, not a folder; give a folder"
    assert readme.read_text() == "hello"
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_output(str(readme / "sub"), "--output")
    check_output(str(tmp_path / "new" / "deeper"), "--output")


def test_kafka_run_fails_fast_when_no_broker_answers(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    argv = ["run", str(QUICKSTART), "--stream", "kafka", "--bootstrap", f"127.0.0.1:{port}"]
    assert main(argv) == 2
    assert time.monotonic() - start < 15  # not after training (72 s before)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --bootstrap: no Kafka broker answers at 127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        check_broker("nonsense", wait=0)
    with socket.socket() as listener:  # something listening passes at once
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        check_broker(f"127.0.0.1:{listener.getsockname()[1]}", wait=1)


def test_the_error_printer_keeps_square_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_error("install it: pip install 'unlearnsim[survey]'\n[bold]second[/]") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: install it: pip install 'unlearnsim[survey]'",
        "error: [bold]second[/]",
    ]


def test_a_ready_file_that_is_not_a_consumers_is_refused(tmp_path: Path) -> None:
    """Issue 28: the consumer replaces and deletes its ready file: never someone's file."""
    from server.preflight import check_ready_file

    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    with pytest.raises(ConfigError, match=r"--ready-file: .* is not a consumer's ready file"):
        check_ready_file(str(mine))
    with pytest.raises(ConfigError, match="is not a consumer's ready file"):
        check_ready_file(str(tmp_path))  # a folder
    ready = tmp_path / "ready"
    ready.write_text('{"pid": 1, "ready_at": 0.0, "seconds_to_ready": 1.0}\n')
    check_ready_file(str(ready))  # an earlier consumer's: replaced
    check_ready_file(str(tmp_path / "absent"))
    check_ready_file(None)
    assert mine.read_text() == "mine"


def test_the_time_estimate_counts_a_batch_per_tick() -> None:
    """The stream is applied tick by tick: the quickstart's 30 ticks are 30 batches (its run
    makes 30), not its requests over ``max_batch_requests`` (6.5), and each batch costs time."""
    from simulator.scenario.preflight import _stream_batches

    sc = scenario()
    assert 28 <= _stream_batches(sc) <= 32
    one_batch_a_tick = estimate(sc).seconds
    fewer = estimate(scenario("stream.max_batch_requests=1000")).seconds
    assert one_batch_a_tick == pytest.approx(fewer)  # the cap splits nothing here
    longer = estimate(scenario("stream.phases.0.ticks=20")).seconds
    assert longer > one_batch_a_tick + 10 * 0.2  # ten more ticks, ten more batches


def test_the_time_estimate_counts_the_start_references() -> None:
    """LiRA's reference heads are trained when the run starts as well as at each checkpoint."""
    from simulator.scenario.preflight import _reference_trainings

    sc = scenario()
    checkpoints, lira = len(sc.evaluation.checkpoints), sc.evaluation.lira_references
    assert _reference_trainings(sc) == checkpoints + 0.5 * lira * (checkpoints + 1)
    no_lira = scenario("evaluation.attacks=[loss]")
    assert _reference_trainings(no_lira) == checkpoints


def test_the_time_estimate_states_its_assumption_and_counts_a_sweeps_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.scenario.preflight import MachineLoad, human_seconds

    report = preflight(scenario(), source=str(QUICKSTART))
    one = human_seconds(report.estimate.seconds)
    idle = MachineLoad(0.1, 2)
    assert report.summary(load=idle).endswith(f"time ~{one} (rough, on an idle machine)")
    six = human_seconds(6 * report.estimate.seconds)
    assert f"time ~{one} per run, ~{six} for the 6 runs (rough" in report.summary(6, idle)
    busy = report.summary(load=MachineLoad(5.24, 2))
    assert busy.endswith(
        "(rough, on an idle machine; the load now is 5.2 on 2 CPUs, expect longer)"
    )
    # run's pre-flight line for a sweep of 3 seeds x 2 methods: the time of its 6 runs
    import argparse

    from rich.console import Console

    from server.preflight import check_run

    console = Console(record=True, width=100)
    args = argparse.Namespace(scenario=str(QUICKSTART), output=str(tmp_path / "o"))
    check_run(args, scenario(), console, runs=6)
    line = " ".join(console.export_text().split())
    assert f"time ~{one} per run, ~{six} for the 6 runs (rough, on an idle machine" in line

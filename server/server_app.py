"""The Flower ServerApp: the scenario's federation, trained and unlearned over Flower.

``main`` parses the run config once (:class:`~server.flower.settings.RunSettings`), maps
partition ids to SuperNodes, and runs the same runner as the in-process transport
(:func:`simulator.runner.run_scenario`) over a :class:`~server.flower.transport.FlowerTransport`:
FedAvg rounds of the extractor, the certified head solved by federated Newton, then the
deletion stream, each deletion sent only to the clients that own the samples. Outputs are the
usual run folder plus ``head.npz``, ``clients.json``, ``transport.json`` (time per message
type: Flower round trips against the clients' compute) and ``flower-server.log`` (client
failures, retries, the partition -> node map).

``flwr run . CONNECTION`` uses the module-level ``app``; :func:`make_server_app` builds one
bound to an explicit scenario for ``run_simulation`` (which passes an empty run config).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from rich.console import Console

from server.cli import output_console
from server.flower.fleet import Fleet
from server.flower.settings import ConsumerSettings, FleetSettings, RunSettings
from server.flower.transport import FlowerTransport
from server.metrics.cli import env_metrics_session
from simulator.errors import ConfigError
from simulator.runner import ReportingConfig, RunResult, run_scenario
from simulator.runner.run_folder import new_run_folder
from simulator.scenario import Scenario, load_scenario

TRANSPORT_FILE = "transport.json"
SERVER_LOG = "flower-server.log"
EventCallback = Callable[[dict[str, Any], Any], None]


def run_on_grid(  # noqa: PLR0913 (entry point: keyword-only run options, each defaulted)
    grid: Grid,
    scenario: Scenario,
    settings: FleetSettings,
    *,
    output_dir: str | Path,
    transport: str,
    console: Console | None = None,
    on_event: Sequence[EventCallback] = (),
    plots: bool = True,
    stream: ConsumerSettings | None = None,
    run_id: int = 0,
) -> RunResult:
    """Run ``scenario`` with the clients behind ``grid``; write the run folder.

    With ``stream`` enabled (a Kafka bootstrap server), the deletion requests come from the
    requests topic instead of the scenario's generated stream (:func:`consume_on_grid`).
    """
    console = console or output_console(highlight=False)
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    log_file = folder / SERVER_LOG

    def log(line: str) -> None:
        console.print(line, markup=False, highlight=False)
        with log_file.open("a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    if scenario.transport != transport:  # e.g. `flwr run` of a scenario file's own transport
        scenario = scenario.model_copy(update={"transport": transport})
    fleet = Fleet(grid, settings, scenario.partition.num_clients, log=log)
    fleet.connect()
    flower = FlowerTransport(fleet, scenario, name=transport)
    try:
        if stream is not None and stream.enabled:
            options = ReportingConfig(console=console, on_event=on_event)  # plots: as before, on
            return consume_on_grid(flower, scenario, stream, folder, options, run_id)
        options = ReportingConfig(console=console, progress=False, plots=plots, on_event=on_event)
        return run_scenario(scenario, options, output_dir=folder, transport=flower)
    except Exception:
        log(f"the run failed:\n{traceback.format_exc()}")
        raise
    finally:  # also after a failure: where the time went until then
        (folder / TRANSPORT_FILE).write_text(json.dumps(flower.summary(), indent=2) + "\n")


def consume_on_grid(
    flower: FlowerTransport,
    scenario: Scenario,
    stream: ConsumerSettings,
    folder: Path,
    options: ReportingConfig,
    run_id: int = 0,
) -> RunResult:
    """Train over ``flower``, then consume the Kafka requests topic (the usual run folder).

    Each Flower run starts from its clients' full shards, so it consumes with fresh state,
    ``OUTPUT/kafka-state/run-<run id>`` by default: every request on the topic is answered
    again for the new model (a deletion must outlive a retrain), and duplicates are found within
    the run. A non-empty ``kafka-state-dir`` given explicitly is refused: its head would not
    match the SuperNodes' data (resuming is the in-process transport's).
    """
    from server.kafka.launch import as_kafka_source, consumer_config
    from server.kafka.session import consume
    from simulator.runner.federation import build_federation

    config = consumer_config(
        stream, folder, scenario, default_state=folder / "kafka-state" / f"run-{run_id}"
    )
    if any(config.state_dir.glob("*")):
        raise ConfigError(
            f"{config.state_dir} holds a checkpoint of an earlier run; resuming is supported "
            "on the in-process transport only: give a fresh kafka-state-dir",
            "run-config kafka-state-dir",
        )
    scenario = as_kafka_source(scenario)
    fed = build_federation(scenario, transport=flower)
    end = consume(fed, config, folder, options)
    return RunResult(folder, end, [])


def make_server_app(  # noqa: PLR0913 (binds run_on_grid's keyword-only options)
    scenario: Scenario,
    settings: FleetSettings,
    *,
    output_dir: str | Path,
    transport: str = "flower-sim",
    results: list[RunResult] | None = None,
    on_event: Sequence[EventCallback] = (),
    plots: bool = True,
    stream: ConsumerSettings | None = None,
) -> ServerApp:
    """A ServerApp bound to ``scenario`` (for ``run_simulation``); results go to ``results``."""
    server_app = ServerApp()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        result = run_on_grid(
            grid,
            scenario,
            settings,
            output_dir=output_dir,
            transport=transport,
            on_event=on_event,
            plots=plots,
            stream=stream,
            run_id=int(context.run_id),
        )
        if results is not None:
            results.append(result)

    return server_app


def engine_name(grid: Grid) -> str:
    """``flower-sim`` on the simulation engine's in-memory grid, else ``flower-deploy``."""
    return "flower-sim" if type(grid).__name__ == "InMemoryGrid" else "flower-deploy"


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the Flower ServerApp.

    ``flwr run`` entry point: everything comes from the run config, and the metrics
    exporter from the ``UNLEARNSIM_METRICS_*`` environment (the SuperLink's).
    """
    _opt_in_polling()
    config = RunSettings.from_run_config(dict(context.run_config))
    scenario = load_scenario(config.scenario_path())
    console = output_console(highlight=False)
    with env_metrics_session(console) as exporters:
        run_on_grid(
            grid,
            scenario,
            config.fleet,
            output_dir=config.output_dir or new_run_folder(scenario.output_dir),
            transport=engine_name(grid) if config.transport == "auto" else config.transport,
            console=console,
            on_event=exporters,
            plots=config.plots,
            stream=config.kafka,
            run_id=int(context.run_id),
        )


def _opt_in_polling() -> None:
    """Apply the Flower pull backoff from the environment.

    ``UNLEARNSIM_FLOWER_POLL`` in the SuperLink's environment: a reply whose content is not
    uploaded yet is pulled again after that many seconds, not Flower's 1 s (docs/flower.md).
    """
    from server.flower import flwr_internals

    polling = flwr_internals.polling_from_env()
    if polling is not None:
        flwr_internals.apply_pull_backoff(polling.fast)

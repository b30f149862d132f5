"""Run a scenario end to end in one process: train, then play the deletion stream."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.runner.loop import StreamState, evaluate, iterate_batches
from simulator.runner.outputs import RunWriter, markdown_table, plot_run, summary_rows
from simulator.runner.resilience import apply_batch_guarded
from simulator.runner.result import RunResult
from simulator.runner.setup import Federation, build_federation
from simulator.runner.transport import ClientTransport
from simulator.scenario import Scenario, scenario_to_yaml


def run_scenario(
    scenario: Scenario,
    *,
    output_dir: str | Path | None = None,
    console: Console | None = None,
    progress: bool = True,
    plots: bool = True,
    on_event: Sequence[Callable[[dict[str, Any], Federation], None]] = (),
    transport: ClientTransport | None = None,
) -> RunResult:
    """Train the federation, consume the stream, write outputs; see :mod:`.outputs`.

    Every event record (start, each deletion batch, end) is also passed to each ``on_event``
    callback with the federation, e.g. a metrics exporter. ``transport`` reaches the clients
    (default in-process; see :mod:`.transport`).
    """
    console = console or Console()
    folder = Path(output_dir or scenario.output_dir)
    wall = time.perf_counter()
    writer = RunWriter(folder)
    writer.text("resolved_scenario.yaml", scenario_to_yaml(scenario))
    try:
        with console.status(f"[bold]{scenario.name}[/]: loading data and training the extractor"):
            fed = build_federation(scenario, transport=transport)
        start = _start_event(fed)
        writer.event(start)
        for cb in on_event:
            cb(start, fed)
        state = StreamState()
        batches = list(iterate_batches(fed))
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
            task = bar.add_task("deletion stream", total=len(batches), info="")
            for i, batch in enumerate(batches):
                n_before = len(state.receipts)
                event = apply_batch_guarded(fed, state, i, batch)
                writer.event(event)
                writer.receipts(state.receipts[n_before:])
                for cb in on_event:
                    cb(event, fed)
                acc = event.get("metrics", {}).get("accuracy_test")
                bar.update(
                    task,
                    advance=1,
                    info=(
                        f"removed {event['removed_total']}  "
                        f"budget {event.get('budget_used_ratio', 0):.0%}"
                        + (f"  acc {acc:.3f}" if acc is not None else "")
                    ),
                )
        end = _end_event(fed, state, batches, wall)
        writer.event(end)
        for cb in on_event:
            cb(end, fed)
        rows = summary_rows(start, state.events, end)
        writer.json("metrics.json", end)
        writer.text("summary.md", f"# {scenario.name}\n\n" + markdown_table(rows))
        if plots and state.events:
            plot_run(folder, state.events, scenario.name)
    finally:
        writer.close()
    table = Table(title=f"{scenario.name}: summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    console.print(f"outputs in [bold]{folder}[/]")
    return RunResult(folder, end, rows)


def _start_event(fed: Federation) -> dict[str, Any]:
    head = fed.head
    weights = {
        str(c): cl.last_weights.to_flat() for c, cl in fed.clients.items() if cl.last_weights
    }
    return {
        "event": "start",
        "scenario": fed.scenario.name,
        "seed": fed.scenario.seed,
        "method": fed.scenario.method,
        "train_rows": int(fed.dataset.y_train.size),
        "public_rows": int(fed.public_indices.size),
        "clients": {str(c): len(s) for c, s in enumerate(fed.client_indices)},
        "num_classes": fed.dataset.num_classes,
        "feature_dim": int(fed.train_features.shape[1]),
        "extractor_round_losses": list(fed.featurizer.round_losses),
        "extractor_certified": fed.extractor_certified,
        "head_newton_iterations": head.last_fit_iterations,
        "training_residual": head.cumulative_residual,
        "budget": head.budget,
        "accounting": head.config.accounting,
        "delta": head.config.delta,
        "requests": len(fed.requests),
        "decorrelation_weights": weights,
        "metrics": evaluate(fed, 0, []),
    }


def _end_event(
    fed: Federation, state: StreamState, batches: list[Any], wall: float
) -> dict[str, Any]:
    head = fed.head
    last_tick = batches[-1][0].tick if batches else 0
    retrains_method = sum(1 for e in state.events if e.get("retrain_reason") == "method")
    retrains_budget = sum(1 for e in state.events if e.get("retrain_reason") == "budget")
    return {
        "event": "end",
        "method": fed.scenario.method,
        "clients": len(fed.clients),
        "train_rows": int(fed.dataset.y_train.size),
        "requests": len(state.receipts),
        "requests_applied": sum(r.status == "applied" for r in state.receipts),
        "requests_rejected": sum(r.status == "rejected" for r in state.receipts),
        "removed_total": len(state.forgotten),
        "retained": fed.head_data.retained_count,
        "retrains_budget": retrains_budget,
        "retrains_method": retrains_method,
        "accounting": head.config.accounting,
        "epsilon_spent": head.epsilon_spent,
        "epsilon_target": fed.scenario.head.epsilon,
        "delta": fed.scenario.head.delta,
        "budget": head.budget,
        "budget_used_ratio": head.cumulative_residual / head.budget,
        "model_version": head.model_version,
        "excluded_clients": {str(c): r for c, r in sorted(fed.excluded.items())},
        "extractor_certified": fed.extractor_certified,
        "decorrelation_weights": {
            str(c): cl.last_weights.to_flat() for c, cl in fed.clients.items() if cl.last_weights
        },
        "metrics": evaluate(fed, last_tick, state.forgotten),
        "wall_seconds": time.perf_counter() - wall,
    }

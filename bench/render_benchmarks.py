"""Render ``docs/benchmarks.md`` from the canonical results in ``bench/results/``.

The page is the hand-written text of ``bench/benchmarks.template.md`` (what each benchmark
measures, how to read it, what did not help) with every ``<!-- table: NAME -->`` line replaced
by a table of the current figures of ``bench/results/NAME.json``: each figure with its target
where it has one, then the file's provenance (date, machine, load, commit) and the command
that reproduces it. ``<!-- files -->`` becomes the list of every result file. Nothing on the
page is typed by hand that a result file holds; ``tests/test_docs.py`` fails when the
committed page and the render differ.

Usage: ``python bench/render_benchmarks.py`` (writes the page) or ``--check`` (exit 1 when the
committed page is not the render).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TEMPLATE = ROOT / "bench" / "benchmarks.template.md"
PAGE = ROOT / "docs" / "benchmarks.md"
NR = "not recorded"

Row = tuple[str, str, str]  # figure, value, target


def num(x: float, digits: int = 0) -> str:
    """``x`` with thousands separators and ``digits`` decimals."""
    return f"{x:,.{digits}f}"


def dur(seconds: float | None) -> str:
    """A duration at a readable scale: ms below 0.1 s, three significant digits above."""
    if seconds is None:
        return "-"
    if seconds < 0.1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 1000:
        return f"{seconds:.3g} s"
    return f"{num(seconds)} s"


def rate(x: float | None, unit: str = "/ s") -> str:
    """A rate, to the unit."""
    return "-" if x is None else f"{num(x)} {unit}"


def share(x: float) -> str:
    """A share of the budget."""
    return f"{x:.2g} of the budget"


def loads(value: Any) -> str:
    """A load average as recorded (a triple, a dict of triples, or a sentence)."""
    if isinstance(value, list):
        return " / ".join(f"{v:.2f}" for v in value[:3])
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')} {loads(v)}" for k, v in value.items())
    return str(value)


def machine_text(machine: Any) -> str:
    """The machine as recorded: GPU or CPU model, cores, memory and speed where known."""
    if not isinstance(machine, dict):
        return str(machine)
    parts = []
    if machine.get("device") not in (None, "cpu"):
        parts.append(str(machine["device"]))
    cpu = machine.get("cpu", NR)
    parts.append(f"CPU {cpu}" if cpu != NR else "CPU model not recorded")
    if isinstance(machine.get("cores"), int):
        parts.append(f"{machine['cores']} cores")
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']} GiB")
    if machine.get("gflops_1_thread"):
        parts.append(
            f"{machine['gflops_1_thread']:.0f} GFLOP/s on one thread, "
            f"{machine['gflops_all_threads']:.0f} on all (float64 1,024-square product)"
        )
    return ", ".join(parts)


def load_average(p: dict[str, Any]) -> Any:
    """The load recorded with the figures: the provenance's own, else its machine's."""
    if "load_average" in p:
        return p["load_average"]
    machine = p.get("machine")
    return machine.get("load_average", NR) if isinstance(machine, dict) else NR


def provenance_text(name: str, doc: dict[str, Any]) -> str:
    """Where the figures of ``name`` come from, in two or three lines."""
    p = doc.get("provenance", {})
    date = p.get("date", NR)
    when = date if date != NR else f"date not recorded (file committed {p['file_committed']})"
    load = loads(load_average(p))
    if "load_average_at_end" in doc:
        load += f" at the start, {loads(doc['load_average_at_end'])} at the end"
    lines = [
        f"`bench/results/{name}.json`: measured {when}; machine: "
        f"{machine_text(p.get('machine', NR))}; load average (1, 5, 15 min) {load}; commit "
        f"{p.get('commit', NR)}."
    ]
    if p.get("load_during_run"):
        lines.append(f"Load during the run: {p['load_during_run']}.")
    command = p.get("command", NR)
    if command != NR:
        by = f" ({p['run_by']})" if p.get("run_by") else ""
        lines.append(f"Reproduce: `{command}`{by}.")
    elif p.get("written_by"):
        lines.append(f"Command not recorded; written by `{p['written_by']}`.")
    source = p.get("converted_from")
    if source and source != f"bench/results/{name}.json":
        lines.append(f"Carried over from `{source}` (in git history).")
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    """A markdown table of figure, value and target."""
    out = ["| figure | value | target |", "|---|---|---|"]
    out += [f"| {f} | {v} | {t} |" for f, v, t in rows]
    return "\n".join(out)


def batch_cell(batch: dict[str, Any] | None) -> str:
    """A batch removal: its time, and whether it was certified or retrained."""
    if batch is None:
        return "-"
    if batch.get("certified_without_retrain"):
        return f"{dur(batch['seconds'])}, certified ({share(batch['budget_used_ratio'])})"
    return f"{dur(batch['seconds'])}, retrain"


def removal_rows(doc: dict[str, Any], targets: dict[str, str]) -> list[Row]:
    """The benchmark workload's figures under the default charge, ``guo`` beside."""
    anchored = doc["modes"]["anchored"]
    guo = doc["modes"].get("guo")
    n_cap = anchored["removals_before_retrain"]
    capped = anchored.get("removals_before_retrain_capped")
    rows: list[Row] = [
        (
            "single removals before the first retrain",
            (f"more than {num(n_cap)} (the run's cap)" if capped else num(n_cap))
            + f"; {anchored['exact_passes_before_retrain']} exact passes"
            + (f"; `guo`: {guo['removals_before_retrain']}" if guo else ""),
            targets.get("before_retrain", ""),
        ),
        (
            "single removals / s (steps that kept the budget)",
            rate(anchored["removals_per_second"])
            + (f"; `guo`: {rate(guo['removals_per_second'])}" if guo else ""),
            targets.get("rate", ""),
        ),
    ]
    stream = anchored.get("stream")
    if stream is not None:
        rows.append(
            (
                f"amortised per removal over {num(stream['removals'])} single removals, "
                "exact passes and retrains included",
                f"{dur(stream['amortised_seconds_per_removal'])} ({stream['exact_passes']} exact "
                f"passes, {stream['retrains']} retrains)",
                targets.get("amortised", ""),
            )
        )
    for size in ("100", "1000", "10000"):
        if size in anchored.get("batches", {}):
            rows.append(
                (
                    f"batch of {num(int(size))} rows from the fresh head",
                    batch_cell(anchored["batches"][size])
                    + (f"; `guo`: {batch_cell(guo['batches'].get(size))}" if guo else ""),
                    targets.get(f"batch_{size}", ""),
                )
            )
    if guo is not None and guo.get("retrain_seconds") is not None:
        rows.append(("retrain (`guo`, the budget's)", dur(guo["retrain_seconds"]), ""))
    build = doc.get("hessian_build")
    if build:
        rows.append(
            (
                "one exact Hessian build (`K n d^2` flops)",
                f"{dur(build['seconds'])} ({num(build['gflops_per_second'])} GFLOP/s)",
                "",
            )
        )
    rows.append(("initial training (cold)", dur(doc["train_seconds"]), ""))
    vs = doc.get("exact_batch_vs_retraining")
    if vs:
        rows.append(
            (
                "1,000-row batch (`exact`) against retraining from scratch",
                f"{dur(vs['batch_removal_seconds'])} vs {dur(vs['retrain_from_scratch_seconds'])}; "
                f"accuracy gap {vs['accuracy_gap_points']:.3f} points, parameter distance "
                f"{vs['relative_param_distance']:.1e}",
                "",
            )
        )
    if doc.get("naive_removals_per_second"):
        rows.append(
            (
                "naive path (Hessian rebuilt per removal)",
                rate(doc["naive_removals_per_second"], "removals / s").replace(
                    num(doc["naive_removals_per_second"]), f"{doc['naive_removals_per_second']:.3f}"
                ),
                "",
            )
        )
    return rows


def removal_cpu(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/removal.py`` on the CPU."""
    return removal_rows(
        doc,
        {
            "before_retrain": ">= 1,000",
            "amortised": "<= 0.05 s",
            "batch_1000": "<= 1 s, no retrain",
        },
    )


def removal_cuda(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/removal.py`` on a GPU, with the long stream of ``removal-stream-cuda``."""
    rows = removal_rows(doc, {"rate": ">= 400 / s", "batch_1000": "<= 10 ms, no retrain"})
    long = load(results, "removal-stream-cuda")
    if long is not None:
        st = long["modes"]["anchored"]["stream"]
        stop = " (the step's time limit ended it)" if long.get("partial") else ""
        rows.insert(
            2,
            (
                f"amortised per removal over {num(st['removals'])} single removals{stop}, "
                "exact passes and retrains included (`removal-stream-cuda.json`)",
                f"{dur(st['amortised_seconds_per_removal'])} ({st['exact_passes']} exact passes, "
                f"{st['retrains']} retrains)",
                "<= 5 ms",
            ),
        )
    return rows


def memory(m: dict[str, float] | None) -> str:
    """Peak GPU memory allocated / reserved."""
    if not m:
        return "-"
    return f"{m['peak_allocated_gb']:.1f} / {m['peak_reserved_gb']:.1f} GB"


def large(doc: dict[str, Any], results: Path) -> list[Row]:
    """A large workload on the GPU (``--large``): what each stage cost and held."""
    rows: list[Row] = [
        ("workload", f"n = {num(doc['n'])}, d = {num(doc['d'])}, K = {doc['k']}", ""),
        ("initial training (cold)", dur(doc["train_seconds"]), ""),
        (
            "one exact Hessian build",
            f"{dur(doc['hessian_build']['seconds'])} "
            f"({num(doc['hessian_build']['gflops_per_second'])} GFLOP/s)",
            "",
        ),
    ]
    if doc.get("single_removals_per_second"):
        rows.append(("single removals / s", rate(doc["single_removals_per_second"]), ""))
    else:
        rows.append(
            ("single removals, batches, retrain", "not measured: the step's time limit", "")
        )
    for size, b in doc.get("batches", {}).items():
        rows.append((f"batch of {num(int(size))} rows", batch_cell(b), ""))
    if doc.get("retrain_seconds") is not None:
        rows.append(("retrain", dur(doc["retrain_seconds"]), ""))
    last = next(
        (doc[k] for k in ("memory_after_retrain", "memory_after_build") if doc.get(k)), None
    )
    rows.append(("GPU memory, peak allocated / reserved", memory(last), ""))
    return rows


def paced_drain(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The paced run and the drain run (None when only paced ran)."""
    paced = next(r for r in doc["runs"] if r["mode"] == "paced")
    drain = next((r for r in doc["runs"] if r["mode"] == "drain"), None)
    return paced, drain


def stream_rows(doc: dict[str, Any], p99_target: str, drain_target: str) -> list[Row]:
    """The Kafka stream: latency paced, throughput drained, what a batch costs."""
    paced, drain = paced_drain(doc)
    rows: list[Row] = [
        (
            f"paced at {num(paced['rate_offered'])} requests / s: p99 request-to-receipt",
            dur(paced["latency_p99_seconds"]),
            p99_target,
        ),
        ("paced: p50 request-to-receipt", dur(paced["latency_p50_seconds"]), ""),
        ("paced: requests / s answered", rate(paced["requests_per_second"]), ""),
        (
            "paced: batches (mean / largest requests), retrains",
            f"{paced['batches']} ({paced['batch_requests_mean']:.0f} / "
            f"{paced['batch_requests_max']}), {paced['retrains']}",
            "",
        ),
    ]
    if "exact_pass_batches" in paced:
        rows.append(
            (
                "paced: batches with an exact pass (anchors), correction steps",
                f"{paced['exact_pass_batches']} ({paced['anchored_batches']}), "
                f"{paced['correction_passes']}",
                "",
            )
        )
    rows += [
        (
            "paced: a batch's mean time (removal, checkpoint, publish)",
            f"{dur(paced['batch_seconds_mean'])} ({dur(paced['removal_seconds_mean'])}, "
            f"{dur(paced['checkpoint_seconds_mean'])}, {dur(paced['publish_seconds_mean'])})",
            "",
        ),
    ]
    if drain is not None:
        rows.append(
            (
                "drain (the same requests as a backlog): requests / s",
                rate(drain["requests_per_second"]),
                drain_target,
            )
        )
    rows.append(
        (
            "requests, receipts",
            f"{num(paced['requests'])}, {num(paced['receipts'])} (all `applied`)"
            if paced["statuses"].get("applied") == paced["requests"]
            else f"{num(paced['requests'])}, {num(paced['receipts'])}",
            "one receipt each",
        )
    )
    same = doc.get("same_code_runs")
    if same:
        p99 = [paced["latency_p99_seconds"]] + [r["paced_latency_p99_seconds"] for r in same]
        drains = [r["drain_requests_per_second"] for r in same if r["drain_requests_per_second"]]
        if drain is not None:
            drains.append(drain["requests_per_second"])
        rows.append(
            (
                f"all {len(p99)} runs of the same code: paced p99, drain",
                f"{dur(min(p99))} to {dur(max(p99))}; {num(min(drains))} to {num(max(drains))} / s",
                "",
            )
        )
    return rows


def stream_cpu(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/stream.py`` on the CPU."""
    return stream_rows(doc, "<= 1 s", ">= 1,000 / s")


def stream_cuda(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/stream.py`` with the head on a GPU."""
    return stream_rows(doc, "<= 0.5 s", "")


def stream_tall(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/stream.py`` on ``bench/stream_synthetic.yaml`` (10^6 rows), on the CPU or with the
    head on the GPU: the stream's figures and the consumer's memory."""
    paced, _ = paced_drain(doc)
    rows = stream_rows(doc, "", "")
    if paced.get("setup_seconds") is not None:
        setup = dur(paced["setup_seconds"])
        rows.append(("consumer's set-up (data, features, the head's training)", setup, ""))
    if paced.get("consumer_peak_rss_gb") is not None:
        rows.append(
            ("consumer's peak resident memory", f"{paced['consumer_peak_rss_gb']:.1f} GB", "")
        )
    if paced.get("gpu_memory_used_peak_gb") is not None:
        before = paced.get("gpu_memory_used_before_gb") or 0.0
        rows.append(
            (
                "card memory in use at its peak (sampled every 0.25 s)",
                f"{paced['gpu_memory_used_peak_gb']:.1f} GB ({before:.1f} GB before the consumer)",
                "",
            )
        )
    return rows


def yes(value: Any) -> str:
    """A check's outcome in words."""
    return {True: "yes", False: "no"}.get(value, "not measured")


def crash_recovery(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/crash_recovery.py``: SIGKILLs against a run that never crashed."""
    starts = [t for s in doc.get("starts", []) if (t := s["to_ready_seconds"]) is not None]
    s = doc.get("settings", {})
    rows: list[Row] = [
        (
            "workload",
            f"{num(s.get('n_train', 0))} rows, {s.get('clients')} clients, "
            f"{num(doc['requests'])} requests in {doc['batches']} batches",
            "",
        ),
        ("requests lost (no receipt)", num(doc["lost"]), "0"),
        ("requests answered twice", num(doc["answered_twice"]), "0"),
        ("receipts equal to the uncrashed run's", yes(doc.get("receipts_equal_reference")), "yes"),
        ("final state equal bit for bit", yes(doc.get("state_equal_reference")), "yes"),
    ]
    if starts:
        rows.append(
            (
                f"start to ready (the first start and {len(starts) - 1} restarts)",
                f"{dur(min(starts))} to {dur(max(starts))}",
                "",
            )
        )
    return rows


def restart(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/crash_recovery.py --kill-at ...``: each start's time to ready."""
    s = doc.get("settings", {})
    rows: list[Row] = [
        (
            "workload",
            f"`{Path(str(s.get('scenario', '?'))).name}`, {num(doc['requests'])} requests in "
            f"batches of {s.get('max_batch')}",
            "",
        )
    ]
    for i, start in enumerate(doc.get("starts", [])):
        ready = start.get("to_ready_seconds")
        what = "first start (builds the federation)" if i == 0 else f"restart {i}"
        if "killed_after" in start:
            what += f", killed after batch {start['killed_after']}"
        else:
            what += f", ran to the end (exit {start.get('exit')})"
        rows.append((what, "not ready" if ready is None else f"{dur(ready)} to ready", ""))
    rows.append(
        ("requests lost / answered twice", f"{doc['lost']} / {doc['answered_twice']}", "0 / 0")
    )
    return rows


def overhead(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/overhead.py``: median seconds per removal where flops are nothing."""
    cells: dict[tuple[str, str, str], list[float]] = {}
    for triple in doc["triples"]:
        for side, run in triple.items():
            if not isinstance(run, dict) or "rows" not in run:
                continue
            for r in run["rows"]:
                key = (side, r["backend"], r["accounting"])
                cells.setdefault(key, []).append(r["median_seconds"])
    rows: list[Row] = []
    sides = [s for s in doc["triples"][0] if isinstance(doc["triples"][0][s], dict)]
    for (side, backend, accounting), values in sorted(cells.items()):
        if side == sides[0] or ("gpu" in side and backend != "torch"):
            continue  # the baseline itself; numpy has no GPU code path
        before = cells.get((sides[0], backend, accounting))
        ratio = (
            f"; {min(before) / max(values):.1f}x to {max(before) / min(values):.1f}x "
            f"below `{sides[0]}` ({dur(min(before))} to {dur(max(before))})"
            if before
            else ""
        )
        rows.append(
            (
                f"{backend}, `{accounting}` ({side.replace('_', ' ')})",
                f"{dur(min(values))} to {dur(max(values))}{ratio}",
                ">= 5x" if backend == "torch" else "",
            )
        )
    return rows


def federation(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/federation.py``: the same removals on every transport."""
    targets = {("flower-sim", 3): "<= 0.25 s", ("flower-sim", 10): "<= 0.25 s",
               ("flower-deploy", 3): "<= 1.5 s", ("flower-deploy", 10): "<= 5 s"}  # fmt: skip
    rows: list[Row] = []
    for r in doc["results"]:
        rows.append(
            (
                f"{r['transport']}, {r['clients']} clients: deletion batch median (max)",
                f"{dur(r['deletion_latency_median_seconds'])} "
                f"({dur(r['deletion_latency_max_seconds'])}); start-up "
                f"{dur(r['startup_seconds'])}, total {dur(r['total_seconds'])}",
                targets.get((r["transport"], r["clients"]), ""),
            )
        )
    exact = doc.get("head_accounting_exact")
    if exact:
        for r in exact["results"]:
            if r["transport"] == "flower-deploy":
                rows.append(
                    (
                        f"flower-deploy, {r['clients']} clients, `head.accounting=exact`",
                        f"{dur(r['deletion_latency_median_seconds'])} median",
                        "",
                    )
                )
    for idle in doc.get("idle_fleet", []):
        rows.append(
            (
                f"idle fleet, {idle['clients']} SuperNodes ({idle['supernodes']})",
                f"{idle['cpu_percent_of_one_core']:.1f}% of one core",
                "",
            )
        )
    diffs = {r["head_max_abs_diff_vs_inprocess"] for r in doc["results"]}
    rows.append(("final head, largest difference to in-process", f"{max(diffs):g}", "0"))
    return rows


def methods(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/methods.py``: CPU seconds of ``remove`` as a ratio to ``cr``."""
    return [
        (
            f"`{name}`",
            f"{m['batch']['ratio_to_cr']:.3g}x `cr` "
            f"({m['batch']['cpu_seconds_per_sample'] * 1e3:.3g} ms of CPU per sample)",
            "",
        )
        for name, m in doc["methods"].items()
    ]


def estimates(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/estimates.py``: the pre-flight's time estimate against the measured time."""
    return [
        (
            f"`{s['scenario']}`",
            f"{dur(s['estimate_seconds'])} estimated, {dur(s['measured_seconds'])} measured "
            f"(ratio {s['measured_seconds'] / s['estimate_seconds']:.2f})",
            f"within {doc['factor']:g}x",
        )
        for s in doc["scenarios"]
    ]


def state_writer(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/state_writer.py``: writing the checkpoint's state file."""
    return [
        ("state file", f"{doc['megabytes']:.0f} MB", ""),
        ("write time (median)", dur(doc["write_seconds_median"]), ""),
        (
            "a pure-Python loop on the main thread meanwhile, share of its speed alone",
            f"{doc['loop_fraction_median']:.2f}",
            "",
        ),
    ]


def mutation_check(doc: dict[str, Any], results: Path) -> list[Row]:
    """``scripts/mutation-check``: mutants of the certificate's code against the tests."""
    verdicts: dict[str, int] = {}
    for m in doc["mutants"]:
        verdicts[m["verdict"]] = verdicts.get(m["verdict"], 0) + 1
    rows: list[Row] = [("mutants", num(len(doc["mutants"])), "")]
    rows += [(f"verdict `{v}`", num(c), "") for v, c in sorted(verdicts.items())]
    return rows


def workloads(doc: dict[str, Any], results: Path) -> list[Row]:
    """``bench/workloads.py``: memory and flops of larger workloads (a model)."""
    return [
        (
            w["name"],
            f"steady {w['steady_gb']:.1f} GB, retrain peak {w['peak_gb']:.1f} GB; build "
            f"{w['hessian_build_flops']:.1e} flops",
            "",
        )
        for w in doc["workloads"]
    ]


AXIS_NAMES = {"n": "n", "d": "d", "k": "K"}


def scale_point(p: dict[str, Any], gpu: bool) -> list[str]:
    """One point of the scale sweep: its shape and what each operation cost."""
    removal = "-"
    if p.get("removal_seconds") is not None:
        removal = f"{dur(p['removal_seconds'])} ({p['retrains']} / {p['exact_passes']})"
    batch = "-"
    if p.get("batch_seconds") is not None:
        batch = dur(p["batch_seconds"]) + ("" if p.get("batch_certified") else ", retrain")
    rss = "-" if p.get("peak_rss_gb") is None else f"{p['peak_rss_gb']:.2f} GB"
    cells = [num(p["n"]), num(p["d"]), str(p["k"]), dur(p.get("train_seconds")), removal, batch]
    cells += [dur(p.get("retrain_seconds")), rss]
    if gpu:
        cells.append("-" if p.get("peak_gpu_gb") is None else f"{p['peak_gpu_gb']:.1f} GB")
    return cells


def scale(doc: dict[str, Any], results: Path) -> str:
    """``bench/scale.py``: cost against n, d and K, one axis at a time around a base point.

    One table: a block of rows per axis, the base point in each block; then the points that
    did not finish and why.
    """
    gpu = doc["device"] == "cuda"
    base = doc["base"]
    head = ["varies", "n", "d", "K", "set-up (training)",
            f"single removal, amortised over {num(doc['stream_removals'])} "
            "(retrains / exact passes)",
            f"{num(doc['batch_rows'])}-row batch", "retrain", "peak RSS"]  # fmt: skip
    if gpu:
        head.append("peak GPU memory (allocated)")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    unfinished = []
    points = doc["points"]
    for axis in ("n", "d", "k"):
        block = [p for p in points if p["axis"] in (axis, "base")]
        if not any(p["axis"] == axis for p in block):
            continue
        for p in sorted(block, key=lambda p: p[axis]):
            label = AXIS_NAMES[axis] + (" (base)" if p["axis"] == "base" else "")
            out.append("| " + " | ".join([label, *scale_point(p, gpu)]) + " |")
    for p in points:
        if p["status"] != "ok":
            unfinished.append(f"n = {num(p['n'])}, d = {num(p['d'])}, K = {p['k']}: {p['status']}")
    out.append("")
    out.append(
        f"Base point n = {num(base['n'])}, d = {num(base['d'])}, K = {base['k']}; "
        f"`{doc['accounting']}` charge; peak RSS is the whole process (the interpreter and its "
        f"libraries alone: {doc['baseline_rss_gb']:.2f} GB)."
        + (f" Not finished: {'; '.join(unfinished)}." if unfinished else "")
    )
    return "\n".join(out)


#: Result files rendered as a whole table of their own (not figure / value / target rows).
def clients(doc: dict[str, Any], results: Path) -> str:
    """``bench/clients.py``: set-up, deletion batch and memory at 10 to 1,000 clients."""
    out = [
        "| transport | clients | batch kind | set-up (build + rest) | deletion batch, median (max) "
        "| all-client rounds / owners only | peak memory, PSS (RSS) | same head and receipts "
        "as in-process |",
        "|---|---|---|---|---|---|---|---|",
    ]
    kinds = {"all-clients": "exact round every batch", "owners": "owners only"}
    for r in doc["results"]:
        same = r.get("receipts_equal_inprocess")
        diff = r.get("head_max_abs_diff_vs_inprocess")
        agree = (
            "-"
            if same is None or r["transport"] == "inprocess"
            else (f"{'yes' if same else 'NO'} (head {diff:g})")
        )
        target = " (target < 5 s)" if r["clients"] >= 1000 else ""
        out.append(
            f"| {r['transport']} | {num(r['clients'])} | {kinds.get(r['kind'], r['kind'])} "
            f"| {dur(r['setup_seconds'])} + {dur(r['other_seconds'])} "
            f"| {dur(r['batch_median_seconds'])} ({dur(r['batch_max_seconds'])}){target} "
            f"| {r['batches_all_clients_round']} / {r['batches_owners_only']} "
            f"| {num(r['peak_memory_pss_mib'])} MiB ({num(r['peak_memory_rss_mib'])} MiB) "
            f"| {agree} |"
        )
    return "\n".join(out)


def rereference(doc: dict[str, Any], results: Path) -> str:
    """``bench/rereference.py``: single removals after a purge, with and without rebuilds."""
    out = [
        "| residual budget | `rereference_after` | exact passes (rate) | Hessian rebuilds "
        "| all removals | per removal, median (p99) |",
        "|---|---|---|---|---|---|",
    ]
    for budget in doc["budgets"]:
        for r in budget["runs"]:
            out.append(
                f"| {budget['budget']:.3f} (epsilon {budget['epsilon']:g}) "
                f"| {r['rereference_after'] or '0 (never)'} "
                f"| {r['exact_passes']} ({r['pass_rate']:.2f}) | {r['rebuilds']} "
                f"| {dur(r['seconds_total'])} | {dur(r['seconds_median'])} "
                f"({dur(r['seconds_p99'])}) |"
            )
    costs = doc["costs_after_purge"]
    out.append("")
    text = (
        f"At the purged head one exact pass took {dur(costs['exact_pass_seconds'])} and one "
        f"rebuild of the Hessian {dur(costs['rebuild_seconds'])}: a rebuild costs "
        f"{costs['ratio']:.0f} passes here."
    )
    if costs.get("moved_classes"):
        moved = ", ".join(str(c) for c in costs["moved_classes"])
        text += (
            f" The classes that moved ({moved}: the fewest that hold 80% of the squared gap) "
            f"were rebuilt in {dur(costs['moved_rebuild_seconds'])}, "
            f"{costs['moved_ratio']:.0f} passes."
        )
    out.append(text)
    return "\n".join(out)


def training(doc: dict[str, Any], results: Path) -> str:
    """``bench/training.py``: the head trained from zero by each solver, per size."""
    out = [
        "| rows | solver | seconds | iterations (Newton) | training residual |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for size in doc["sizes"]:
        for run in size["runs"]:
            out.append(
                f"| {num(size['n_train'])} | `{run['solver']}` | {dur(run['seconds'])} | "
                f"{run['iterations']} ({run['newton_iterations']}) | {run['residual']:.1e} |"
            )
        gaps = size.get("head_distance_per_class")
        if gaps:
            notes.append(
                f"At {num(size['n_train'])} rows the two heads differ by at most "
                f"{max(gaps):.1e} per class (the stopping rule bounds it by "
                f"{size['head_distance_bound']:.0e})."
            )
    return "\n".join(out) + ("\n\n" + " ".join(notes) if notes else "")


GRIDS: dict[str, Callable[[dict[str, Any], Path], str]] = {
    "training-cpu": training,
    "clients-cpu": clients,
    "rereference-cpu": rereference,
    "scale-cpu": scale,
    "scale-cuda": scale,
}

#: What the page says where a result file is not there yet (default: run the command above).
MISSING = {
    "scale-cuda": 'Not measured on a GPU yet: `STEPS="scale" bash bench/gpu` measures it '
    "(its `scale.json` is this file).",
    "stream-tall-cuda": 'Not measured on a GPU yet: `STEPS="kafka-tall" bash bench/gpu` measures '
    "it (its `stream-tall.json` is this file).",
}

TABLES: dict[str, Callable[[dict[str, Any], Path], list[Row]]] = {
    "removal-cpu": removal_cpu,
    "removal-cuda": removal_cuda,
    "removal-tall-cuda": large,
    "removal-wide-cuda": large,
    "stream-cpu": stream_cpu,
    "stream-cpu-busy": stream_cpu,
    "stream-cuda": stream_cuda,
    "stream-tall-cpu": stream_tall,
    "stream-tall-cuda": stream_tall,
    "crash-recovery-cpu": crash_recovery,
    "restart-cpu": restart,
    "overhead": overhead,
    "federation": federation,
    "methods": methods,
    "estimates": estimates,
    "state-writer": state_writer,
    "mutation-check": mutation_check,
    "workloads": workloads,
}


def load(results: Path, name: str) -> dict[str, Any] | None:
    """``RESULTS/NAME.json``, or None."""
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def section(results: Path, name: str) -> str:
    """The table of one result file and its provenance."""
    doc = load(results, name)
    if doc is None:
        return MISSING.get(
            name, f"(`bench/results/{name}.json` is missing: run the command above.)"
        )
    body = GRIDS[name](doc, results) if name in GRIDS else table(TABLES[name](doc, results))
    return body + "\n\n" + provenance_text(name, doc)


def files_list(results: Path) -> str:
    """Every result file with its date and machine."""
    out = ["| file | measured | machine | load average (1, 5, 15 min) |", "|---|---|---|---|"]
    for path in sorted(results.glob("*.json")):
        p = json.loads(path.read_text()).get("provenance", {})
        date = p.get("date", NR)
        machine = machine_text(p.get("machine", NR))
        out.append(f"| `{path.name}` | {date} | {machine} | {loads(load_average(p))} |")
    return "\n".join(out)


def render(results: Path = RESULTS, template: Path = TEMPLATE) -> str:
    """The page: the template with its tables filled from ``results``."""
    text = template.read_text()
    text = re.sub(
        r"^<!-- table: ([\w-]+) -->$", lambda m: section(results, m.group(1)), text, flags=re.M
    )
    return text.replace("<!-- files -->", files_list(results))


def main() -> int:
    """Write the page, or with ``--check`` say whether it is the render."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the page is not the render")
    args = p.parse_args()
    page = render()
    if args.check:
        same = PAGE.read_text() == page
        print("docs/benchmarks.md is the render" if same else "docs/benchmarks.md differs")
        return 0 if same else 1
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

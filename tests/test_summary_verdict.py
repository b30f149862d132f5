"""The certificate verdict and the per-phase table at the top of every summary."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from support.scenarios import SCENARIOS, SMALL

from simulator.reporting.run_report import (
    happened,
    happened_rows,
    read_headline,
    read_summary,
    read_verdict,
)
from simulator.reporting.verdict import certificate_verdict, phase_table
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

END = {
    "accounting": "guo",
    "epsilon_target": 1.0,
    "delta": 1e-4,
    "method": "decoremoval",
    "extractor_certified": False,
}


def batch(k: int, phase: str, charged: float, cumulative: float, **kw: object) -> dict:
    b = {
        "batch": k, "phase": phase, "charged": charged, "cumulative_residual": cumulative,
        "budget": 2.0, "samples": 10, "requests": 5, "applied": 5, "retrained": False,
        "withdrawn_clients": [], "metrics": {"accuracy_test": 0.9 - k / 100},
    }  # fmt: skip
    b.update(kw)
    return b


def test_verdict_names_the_largest_charge_and_its_cause() -> None:
    batches = [
        batch(0, "warmup", 0.1, 0.1),
        batch(1, "withdrawals", 1.78, 1.88, withdrawn_clients=[3], samples=240, requests=1),
        batch(2, "withdrawals", 2.5, 0.0, retrained=True, retrain_reason="budget"),
        batch(3, "tail", 0.2, 0.2, checkpoints=[
            {"checkpoint": 250, "residual_against_cold_fit": 0.3, "budget": 2.0}
        ]),
    ]  # fmt: skip
    v = certificate_verdict({}, batches, END)
    assert v.held and v.headline == "Certificate: HELD"
    text = "\n".join(v.lines)
    assert "(1.0, 0.0001)-certified removal" in text and "linear head only" in text
    assert "accounting: guo" in text
    assert (
        "largest single charge: 1.78 = 89.0% of the budget, batch 1 (phase 'withdrawals')" in text
    )
    assert "withdrawal of client 3, 240 samples" in text
    assert "retrains: 1 (budget 1)" in text
    assert "largest charge that forced a retrain: 2.5 = 125.0% of the budget, batch 2" in text
    assert "within the budget at all 1 reference checkpoint(s)" in text

    phases = phase_table(batches)
    assert [r[0] for r in phases.rows] == ["warmup", "withdrawals", "tail"]
    warm, withdrawals, _ = phases.rows
    assert withdrawals[1:4] == ("2", "6", "250")  # batches, requests, samples
    assert withdrawals[5:8] == ("1", "0", "1")  # certified updates, exact passes, retrains
    assert warm[8] == "90.00%"  # test accuracy at the end of the phase


def test_verdict_not_held_when_a_charge_or_a_checkpoint_exceeds_the_budget() -> None:
    over = [batch(0, "a", 2.5, 2.5)]
    public = {**END, "extractor_certified": True, "scope": "whole_model"}
    v = certificate_verdict({}, over, {**public, "extractor_data": "public"})
    assert not v.held and v.headline == "Certificate: NOT HELD"
    assert any("ABOVE the budget" in x for x in v.lines)
    assert any("certified removal of the whole model" in x for x in v.lines)
    ref = [batch(0, "a", 0.1, 0.1, checkpoints=[
        {"checkpoint": 10, "residual_against_cold_fit": 3.0, "budget": 2.0}
    ])]  # fmt: skip
    v = certificate_verdict({}, ref, END)
    assert not v.held and any("EXCEEDED" in x for x in v.lines)
    retrained = [batch(k, "a", 0.0, 0.0, retrained=True, retrain_reason="method") for k in range(3)]
    v = certificate_verdict({}, retrained, {**END, "method": "retrain_head"})
    assert v.held and "exact" in v.headline


def test_what_happened_counts_certified_updates_retrains_and_the_budget() -> None:
    batches = [
        batch(0, "warmup", 0.1, 0.1, budget_used_ratio=0.05),
        batch(1, "warmup", 1.8, 1.9, budget_used_ratio=0.95),
        batch(2, "tail", 2.5, 0.0, retrained=True, retrain_reason="budget", budget_used_ratio=0.0),
        batch(3, "tail", 0.0, 0.0, samples=0, budget_used_ratio=0.0),  # duplicates only
        batch(4, "tail", 0.2, 0.2, budget_used_ratio=0.1),
    ]
    end = {**END, "retrains_budget": 1, "retrains_method": 0, "budget_used_ratio": 0.1}
    batches[4]["anchored"] = True  # an exact pass reset the charge
    h = happened(batches, end)
    assert (h.removing, h.certified, h.exact_passes, h.retrains) == (4, 3, 1, {"budget": 1})
    assert h.headline() == (
        "4 removing batch(es): 3 certified update(s), 1 exact pass(es), 1 (budget 1) retrain(s) "
        "from scratch; budget used: peak 95.00%, final 10.00%"
    )
    rows = dict(happened_rows(batches, end))
    assert rows["certified updates / removing batches"] == "3 / 4"
    assert rows["exact passes (anchored)"] == "1"
    assert rows["retrains from scratch (by reason)"] == "1 (budget 1)"
    assert rows["budget used (peak / final)"] == "95.00% / 10.00%"
    assert (
        dict(happened_rows(batches[:2], {**END, "budget_used_ratio": 0.95}))[
            "retrains from scratch (by reason)"
        ]
        == "0"
    )


def test_a_real_run_leads_with_what_happened_then_the_verdict(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)
    console = Console(record=True, width=120)
    run_scenario(
        scenario, ReportingConfig(console=console, progress=False, plots=False), output_dir=tmp_path
    )
    text = (tmp_path / "summary.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "# quickstart" and lines[2].startswith("**What happened:** ")
    assert "certified update(s)" in lines[2] and "budget used: peak" in lines[2]
    assert lines[4].startswith("## Certificate: HELD")
    assert read_headline(tmp_path / "summary.md") == lines[2].removeprefix("**What happened:** ")
    rows = read_summary(tmp_path / "summary.md")
    assert [k for k, _ in rows[:4]] == [
        "certified updates / removing batches",
        "exact passes (anchored)",
        "retrains from scratch (by reason)",
        "budget used (peak / final)",
    ]
    assert text.index("## Certificate") < text.index("| metric | value |") < text.index("## Phases")
    verdict = read_verdict(tmp_path / "summary.md")
    assert verdict[0] == "Certificate: HELD" and any("largest single charge" in x for x in verdict)
    assert any(x.startswith("retrains: ") for x in verdict)
    assert any(k == "samples removed" for k, _ in read_summary(tmp_path / "summary.md"))
    shown = console.export_text()
    assert shown.index("what happened: ") < shown.index("Certificate: HELD")
    assert "certified update(s)" in shown[shown.index("what happened: ") :]
    assert "quickstart: training the extractor" in shown  # stages named as they start (piped)
    assert "Certificate: HELD" in shown and "largest single charge" in shown
    assert "Phases" in shown and "Membership inference" in shown


def test_the_phase_table_shows_the_peak_never_a_sum_and_the_exact_passes() -> None:
    """Exact passes and retrains reset the charge: a sum of charges would read 150% here."""
    batches = [
        batch(0, "purge", 0.9, 0.9, budget_used_ratio=0.45),
        batch(1, "purge", 0.9, 1.8, budget_used_ratio=0.9),
        batch(2, "purge", 0.1, 0.1, budget_used_ratio=0.05, anchored=True),
        batch(3, "purge", 1.8, 1.9, budget_used_ratio=0.95),
        batch(4, "purge", 2.5, 0.0, retrained=True, retrain_reason="budget", anchored=True,
              budget_used_ratio=0.0),
    ]  # fmt: skip
    table = phase_table(batches)
    assert table.header == (
        "phase", "batches", "requests", "samples", "peak budget", "certified", "exact passes",
        "retrains", "test acc. (end)",
    )  # fmt: skip
    (row,) = table.rows
    assert row[4] == "95.0%"  # the peak, not 0.45 + 0.9 + 0.05 + 0.95 of the budget
    assert row[5:8] == ("4", "1", "1")  # a retrained batch's pass is not counted


def test_budget_png_marks_the_exact_passes(tmp_path: Path) -> None:
    from simulator.reporting.run_report import plot_run

    batches = [
        batch(k, "a", 0.5, 0.5, tick=k, removed_total=10 * (k + 1), budget_used_ratio=r,
              anchored=k == 2)
        for k, r in enumerate((0.3, 0.9, 0.05, 0.4))
    ]  # fmt: skip
    figures = plot_run(tmp_path, batches, "t")
    (ax,) = figures["budget.png"].axes[:1]
    marked = [ln for ln in ax.get_lines() if ln.get_gid() == "exact_pass"]
    assert len(marked) == 1 and list(marked[0].get_xdata()) == [2.0]
    assert list(marked[0].get_ydata()) == [0.05]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("exact pass") for t in legend)

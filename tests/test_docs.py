"""The docs can be trusted: links resolve, commands parse, figures come from the results.

* every internal link of README.md and docs/*.md points at a file that exists, and a ``#anchor``
  at a heading of that file (GitHub's slugs);
* every ``unlearnsim`` command in their code (fenced blocks and inline spans) names a real
  subcommand and only flags that its parser accepts; a command in a fenced block, a complete
  one, parses as a whole;
* every figure the README quotes carries a ``<!-- figure: FILE KEY.PATH -->`` marker, and the
  number before it is that value of ``bench/results/FILE`` to the digits shown (a value in
  seconds shown in ms is scaled, a ratio shown in % too); a timing or rate in the README's prose
  without a marker fails;
* docs/benchmarks.md is the render of ``bench/results/`` (``bench/render_benchmarks.py``), and
  docs/comparison.md's verdict table that of ``results/`` (``scripts/verdict_table.py``);
* no page tells its history (words of the build's own story, internal issue numbers).

Nothing here writes into the checkout: the render is compared as a string.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import shlex
import shutil
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from server.cli import build_parser

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code."""
    return SPAN.sub("", FENCE.sub("", text))


def slug(heading: str, seen: dict[str, int]) -> str:
    """GitHub's anchor for a heading (duplicates get -1, -2, ...)."""
    text = re.sub(r"<[^>]+>", "", heading.replace("`", "")).strip().lower()
    base = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a markdown file's headings."""
    seen: dict[str, int] = {}
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return frozenset(slug(m.group(1), seen) for m in re.finditer(r"^#+\s+(.*)$", text, re.M))


def links(text: str) -> list[str]:
    """Link and image targets outside code."""
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose(text))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_internal_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert broken == []


def test_the_link_check_fails_on_a_missing_anchor(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# One `thing` (here)\n\n[ok](#one-thing-here) [bad](#two) [gone](b.md)\n")
    assert anchors(page) == {"one-thing-here"}
    targets = links(page.read_text())
    assert targets == ["#one-thing-here", "#two", "b.md"]


# --- commands -------------------------------------------------------------------------------

COMMAND = re.compile(r"(?:^|[\s(])(?:\S*/)?unlearnsim\s+([a-z][\w-]*)(?=\s|$)(.*)")


def commands(text: str) -> list[tuple[str, bool]]:
    """Each ``unlearnsim ...`` command in the code of ``text``, and whether it is complete
    (a line of a fenced block, continuations joined) or a fragment (an inline span)."""
    found: list[tuple[str, bool]] = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines()[1:-1]:
            found += [(m.group(0), True) for m in COMMAND.finditer(line)]
    for span in SPAN.findall(FENCE.sub("", text)):
        found += [(m.group(0), False) for m in COMMAND.finditer(span)]
    return found


def words(command: str) -> list[list[str]]:
    """The arguments after ``unlearnsim``, one list per alternative (``a|b`` spells two):
    shell comments, pipes and what follows ``&&`` or ``;`` dropped, ``[optional]`` brackets
    and ``...`` removed."""
    text = command.replace("\\|", "|")
    text = re.split(r"\s(?:&&|\|\||;|&|>|\|)(?:\s|$)|\s#", text)[0]
    tokens = shlex.split(text.split("unlearnsim", 1)[1], posix=True)
    tokens = [t.strip("[]").removesuffix("...") for t in tokens if t.strip("[].")]
    variants: list[list[str]] = [[]]
    for token in tokens:
        options = token.split("|") if "|" in token and not token.startswith("-") else [token]
        variants = [[*v, o] for v in variants for o in options]
    return variants


@cache
def parsers() -> dict[str, argparse.ArgumentParser]:
    """Each (sub)command's parser by its words, e.g. ``run``, ``compare runs``."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out[f"{prefix}{name}".strip()] = sub
                    walk(sub, f"{prefix}{name} ")

    walk(build_parser(), "")
    return out


@cache
def accepted(words: str) -> frozenset[str]:
    """The options that ``unlearnsim WORDS --help`` lists (its parser's, not flags that its
    help text merely mentions)."""
    return frozenset(s for a in parsers()[words]._actions for s in a.option_strings)


def check(args: list[str], complete: bool) -> str | None:
    """What is wrong with ``unlearnsim ARGS``, or None."""
    name = args[0]
    if name not in parsers():
        return f"no subcommand {name!r}"
    actions = [k.split(" ", 1)[1] for k in parsers() if k.startswith(f"{name} ")]
    if actions and len(args) > 1 and not args[1].startswith("-"):
        if args[1] not in actions:
            return f"{name} has no action {args[1]!r}"
        name = f"{name} {args[1]}"
    flags = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    unknown = sorted(flags - accepted(name))
    if unknown:
        return f"{name} does not accept {', '.join(unknown)}"
    if complete:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
            build_parser().parse_args(args)
            return None
        return err.getvalue().strip().splitlines()[-1]
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_parses(page: Path) -> None:
    problems = []
    for command, complete in commands(page.read_text(encoding="utf-8")):
        for args in words(command):
            if args and (problem := check(args, complete)):
                problems.append(f"{command.strip()}: {problem}")
    assert problems == []


def test_the_command_check_fails_on_a_bad_flag_action_or_subcommand() -> None:
    text = (
        "```bash\nunlearnsim run scenarios/quickstart.yaml --no-such-flag \\\n  --output x\n```\n"
        "and `unlearnsim stack up|sideways` and `.venv/bin/unlearnsim nothing --help`\n"
    )
    found = commands(text)
    assert [complete for _, complete in found] == [True, False, False]
    problems = [check(args, complete) for cmd, complete in found for args in words(cmd)]
    assert problems == [
        "run does not accept --no-such-flag",
        None,
        "stack has no action 'sideways'",
        "no subcommand 'nothing'",
    ]
    assert check(["run"], complete=True) is not None  # the scenario is required
    assert check(["run", "s.yaml", "--seeds", "3", "--output", "o"], complete=True) is None
    assert check(["run", "--seeds", "3"], complete=False) is None  # a fragment names flags


# --- figures ---------------------------------------------------------------------------------

RESULTS = ROOT / "bench" / "results"
MARKED = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*(ms|s|%|x)?[^\d<]{0,40}?<!-- figure: (\S+) (\S+) -->")
#: A timing or rate in prose: a number with a unit of time, or per second.
TIMING = re.compile(r"\d[\d,]*(?:\.\d+)?\s*(?:ms|s|seconds|min|requests ?/ ?s|/ ?s)\b")


def value_at(doc: Any, path: str) -> Any:
    """``doc``'s value at a dotted path (list indices as numbers)."""
    for key in path.split("."):
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def figure_problems(text: str, results: Path) -> list[str]:
    """Each marked figure that is not its result's value as shown, and each unmarked timing."""
    problems = []
    for m in MARKED.finditer(text):
        shown, unit, file, path = m.groups()
        value = float(value_at(json.loads((results / file).read_text()), path))
        if unit == "ms" and "seconds" in path.rsplit(".", 1)[-1]:
            value *= 1e3
        elif unit == "%" and not path.endswith("percent"):
            value *= 100
        decimals = len(shown.partition(".")[2])
        if abs(value - float(shown.replace(",", ""))) > 0.5 * 10**-decimals + 1e-9:
            problems.append(f"{m.group(0)}: the result holds {value:.{decimals + 2}f}")
    unmarked = prose(MARKED.sub("", text))
    problems += [f"{t}: a figure without a marker" for t in TIMING.findall(unmarked)]
    return problems


def test_readme_figures_are_the_results() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert MARKED.search(readme), "the README quotes no measured figure"
    assert figure_problems(readme, RESULTS) == []


def test_the_figure_check_fails_on_a_stale_or_unmarked_figure(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"runs": [{"p99_seconds": 1.6407}]}))
    good = "p99 1.64 s <!-- figure: r.json runs.0.p99_seconds --> or 1,641 ms\n"
    assert figure_problems(good.replace(" or 1,641 ms", ""), tmp_path) == []
    assert figure_problems("p99 1,641 ms<!-- figure: r.json runs.0.p99_seconds -->", tmp_path) == []
    assert (
        len(figure_problems("p99 1.7 s <!-- figure: r.json runs.0.p99_seconds -->", tmp_path)) == 1
    )
    assert figure_problems("it took 3.5 s here\n", tmp_path) == ["3.5 s: a figure without a marker"]


# --- the benchmarks page ----------------------------------------------------------------------


def script(path: Path) -> ModuleType:
    """The script at ``path`` (a file outside the packages) as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def renderer() -> ModuleType:
    """``bench/render_benchmarks.py`` as a module."""
    return script(ROOT / "bench" / "render_benchmarks.py")


def test_benchmarks_page_is_the_render_of_the_results() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page == renderer().render(), "run: python bench/render_benchmarks.py"


def test_the_render_follows_the_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    stream = json.loads((results / "stream-cpu.json").read_text())
    stream["runs"][0]["latency_p99_seconds"] = 9.87
    (results / "stream-cpu.json").write_text(json.dumps(stream))
    render = renderer().render
    assert "| 9.87 s | <= 1 s |" in render(results) and render(results) != render()


# --- the comparison's verdict table -----------------------------------------------------------


def verdict_table() -> ModuleType:
    """``scripts/verdict_table.py`` as a module."""
    return script(ROOT / "scripts" / "verdict_table.py")


def test_comparison_verdicts_are_the_results() -> None:
    page = (ROOT / "docs" / "comparison.md").read_text(encoding="utf-8")
    assert verdict_table().START in page
    assert page == verdict_table().updated(page), "run: python scripts/verdict_table.py"


def test_the_verdict_table_follows_the_results(tmp_path: Path) -> None:
    module = verdict_table()
    results = tmp_path / "results"
    for name in module.FOLDERS:
        (results / name).mkdir(parents=True)
        shutil.copy(ROOT / "results" / name / "verdict.csv", results / name)
    path = results / "compare_fashion10" / "verdict.csv"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("no difference", "CR better"), encoding="utf-8")
    page = (ROOT / "docs" / "comparison.md").read_text(encoding="utf-8")
    new = module.updated(page, results)
    assert new != page and "| CR better |" in new and "| CR better |" not in page


# --- no history ------------------------------------------------------------------------------

HISTORY = re.compile(
    r"lending|this session|device minutes|issue [0-9]+|\bissue-[0-9]+|used to be|\bcall [0-9]\b",
    re.I,
)


@pytest.mark.parametrize(
    "page", [*PAGES, ROOT / "bench" / "benchmarks.template.md"], ids=lambda p: p.name
)
def test_pages_describe_the_software_not_its_history(page: Path) -> None:
    found = [
        f"{n}: {line.strip()[:80]}"
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == []

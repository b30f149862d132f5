"""Scenario fuzzer: every shipped scenario, mutated, through the real ``unlearnsim validate``.

Mutations (seeded, so every run tries the same cases): unknown keys (ASCII and unicode), wrong
types, NaN, negative and huge numbers, deleted keys, unicode (and rich-markup-looking) strings.
Each mutated file must give a non-zero exit with one line per problem of the form
``error FILE[:LINE]: dotted.key: message`` naming the mutated key (or the section that holds
it), never a traceback, and each ``validate`` must answer within a few seconds (a SIGALRM turns
a hang into a failure). Mutations that may legitimately be valid (a deleted optional key, a
negative number where one is allowed, a unicode description) only have to answer cleanly.

In-process through :func:`server.cli.main` for speed, plus a few real subprocesses.
"""

from __future__ import annotations

import math
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.cli import main

ROOT = Path(__file__).parent.parent
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
SEED = 15
#: Mutations per kind and scenario.
PER_KIND = 3
#: Seconds one in-process ``validate`` may take (the pre-flight included).
LIMIT_SECONDS = 5.0
MARKUP = "[bold]ünï[/bold] ☃ [survey] 名前"

Path_ = tuple[str | int, ...]


def leaves(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every (path, value) of a YAML tree, containers included (not the root)."""
    if path:
        yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaves(value, (*path, index))


def get(node: Any, path: Path_) -> Any:
    for part in path:
        node = node[part]
    return node


def dotted(path: Path_) -> str:
    return ".".join(map(str, path))


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def wrong_type(value: Any) -> Any:
    """A value of another type than ``value`` that no field of that kind accepts."""
    if isinstance(value, bool):
        return "maybe"
    if is_number(value):
        return "abc"
    if isinstance(value, dict):
        return 17
    if isinstance(value, list):
        return "not a list"
    if value is None:
        return {"nested": True}
    return [1, 2]  # a string


def mutations(doc: dict[str, Any], rng: random.Random) -> list[tuple[str, Any, Path_, bool]]:
    """(kind, mutated document, mutated path, must_fail) for one scenario.

    ``must_fail``: the mutation cannot be valid, so validation must fail and name the key.
    """
    items = list(leaves(doc))
    numbers = [(p, v) for p, v in items if is_number(v)]
    strings = [(p, v) for p, v in items if isinstance(v, str)]
    mappings = [()] + [p for p, v in items if isinstance(v, dict)]
    keyed = [p for p, _ in items if isinstance(p[-1], str)]
    out: list[tuple[str, Any, Path_, bool]] = []

    def mutated(path: Path_, value: Any) -> Any:
        new = yaml.safe_load(yaml.safe_dump(doc))
        if path:
            get(new, path[:-1])[path[-1]] = value
        return new

    for _ in range(PER_KIND):
        parent = rng.choice(mappings)
        for key in ("zz_unknown", "ключ_неизвестный"):
            new = yaml.safe_load(yaml.safe_dump(doc))
            get(new, parent)[key] = 1
            out.append(("unknown key", new, (*parent, key), True))
        path, value = rng.choice(items)
        out.append(("wrong type", mutated(path, wrong_type(value)), path, True))
        path, _ = rng.choice(numbers)
        out.append(("nan", mutated(path, math.nan), path, True))
        out.append(("inf", mutated(path, -math.inf), path, True))
        out.append(("huge int", mutated(path, 10**30), path, True))
        out.append(("huge float", mutated(path, 1e300), path, True))
        out.append(("negative", mutated(path, -rng.choice([1, 7, 10**6])), path, False))
        path, _ = rng.choice(strings)
        out.append(("unicode", mutated(path, MARKUP), path, False))
        path = rng.choice(keyed)
        new = yaml.safe_load(yaml.safe_dump(doc))
        del get(new, path[:-1])[path[-1]]
        out.append(("deleted key", new, path, False))
    return out


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise in the main thread if the block runs longer than ``seconds`` (a hang fails)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"validate ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def named_paths(output: str, file: Path) -> list[str]:
    """The dotted key of every ``error FILE[:LINE]: key: message`` line (None: no key)."""
    paths = []
    for line in output.splitlines():
        assert line.startswith(f"error {file}"), f"not an error line: {line!r}"
        rest = line[len(f"error {file}") :]
        match = re.match(r"^(?::\d+(?::\d+)?)?: ([^\s:]+): ", rest)
        assert match, f"no key named in {line!r}"
        paths.append(match.group(1))
    return paths


def names_the_key(named: list[str], path: Path_) -> bool:
    """Some named key is the mutated key or a section that holds it."""
    target = dotted(path)
    return any(target == n or target.startswith(n + ".") for n in named)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_mutated_scenarios_fail_cleanly_naming_the_key(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    rng = random.Random(f"{SEED}-{scenario.stem}")
    cases = mutations(doc, rng)
    assert len(cases) >= 10 * PER_KIND
    for i, (kind, new, path, must_fail) in enumerate(cases):
        file = tmp_path / f"{i:03d}.yaml"
        file.write_text(yaml.safe_dump(new, allow_unicode=True, sort_keys=False), "utf-8")
        start = time.monotonic()
        with deadline(LIMIT_SECONDS):
            rc = main(["validate", str(file)])
        seconds = time.monotonic() - start
        out, err = capsys.readouterr()
        what = f"{scenario.name}: {kind} at {dotted(path)} -> rc {rc}\n{out}{err}"
        assert seconds < LIMIT_SECONDS, what
        assert "Traceback" not in out + err, what
        assert rc in (0, 2), what
        if rc == 0:
            assert not must_fail, what
            assert out.startswith(f"ok    {file}") and "error" not in out, what
            continue
        named = named_paths(out.strip(), file)
        if must_fail or kind == "unicode":
            assert names_the_key(named, path), what
        if kind == "unicode":
            # the value is shown as written: rich markup in it is text, not styling
            assert "[bold]ünï[/bold]" in out, what


def test_overrides_are_fuzzed_too(capsys: pytest.CaptureFixture[str]) -> None:
    """``--set`` goes through the same checks; the origin is ``--set``."""
    quickstart = str(ROOT / "scenarios" / "quickstart.yaml")
    cases = {
        "rff.dim=1e400": "rff.dim",
        "rff.dim=.nan": "rff.dim",
        "data.synthetic.n_classes=1000000000000000000": "data.synthetic.n_classes",
        "data.synthetic.n_train=1000000000000": "data.synthetic.n_train",
        "stream.phases.0.ticks=-3": "stream.phases.0.ticks",
        f"name='{MARKUP}'": "name",
        "stream.phases.0.rate=[1, 2]": "stream.phases.0.rate",
    }
    for override, key in cases.items():
        with deadline(LIMIT_SECONDS):
            rc = main(["validate", quickstart, "--set", override])
        out, err = capsys.readouterr()
        assert rc == 2 and "Traceback" not in out + err, (override, out, err)
        assert out.startswith(f"error --set: {key}: "), (override, out)
        assert len(out.strip().splitlines()) == 1, out
    # the markup is printed as written
    main(["validate", quickstart, "--set", f"name='{MARKUP}'"])
    assert "[bold]ünï[/bold]" in capsys.readouterr().out
    # a value that is not YAML: one line, naming the key
    assert main(["validate", quickstart, "--set", f"name={MARKUP}"]) == 2
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("error --set name: value is not valid YAML"), line


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_subprocess_validate_and_run_fail_in_one_line(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    doc["rff"]["dim"] = math.nan
    doc["data"]["synthetic"]["зз"] = 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc, allow_unicode=True), "utf-8")
    res = run_cli("validate", str(bad))
    assert res.returncode == 2 and "Traceback" not in res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert sorted(named_paths(res.stdout.strip(), bad)) == ["data.synthetic.зз", "rff.dim"]
    assert len(lines) == 2
    # run refuses before any training, in one line on stderr, naming the key
    for override, key in (
        ("data.synthetic.n_train=1000000000000", "data.synthetic.n_train"),
        ("data.synthetic.n_classes=1000000000000000000", "data.synthetic.n_classes"),
        ("rff.dim=1000000000000000000", "rff.dim"),
    ):
        start = time.monotonic()
        res = run_cli("run", "scenarios/quickstart.yaml", "--set", override, "--no-plots")
        assert time.monotonic() - start < 30
        assert res.returncode == 2 and "Traceback" not in res.stdout + res.stderr, res.stderr
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"error: --set: {key}: "), line

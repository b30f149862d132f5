"""The core must not pull in infrastructure (design.md, "Layers")."""

import subprocess
import sys

FORBIDDEN = ("flwr", "kafka", "prometheus_client")


def test_simulator_imports_no_infrastructure() -> None:
    code = (
        "import sys, pkgutil, importlib, simulator\n"
        "for m in pkgutil.walk_packages(simulator.__path__, 'simulator.'):\n"
        "    importlib.import_module(m.name)\n"
        f"bad = sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "", f"simulator imported: {out.stdout.strip()}"

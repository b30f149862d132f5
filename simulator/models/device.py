"""Device selection and generator-driven seeding of torch's global random state.

Everything in :mod:`simulator.models` draws its randomness from an explicit
``torch.Generator``. Module constructors (``nn.Linear``, ``nn.LSTM``...) and
``nn.Dropout`` only know torch's *global* generators, so :func:`seeded_rng` forks
those, seeds them from the explicit generator, and restores them on exit: the
caller's global random state is never left changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch

from simulator.errors import ConfigError

DeviceSetting = Literal["auto", "cpu", "cuda"]

_SEED_HIGH = 2**62


def resolve_device(setting: DeviceSetting) -> torch.device:
    """Turn a scenario's device setting into a ``torch.device``.

    Parameters
    ----------
    setting
        ``"auto"`` picks CUDA when available and the CPU otherwise; ``"cpu"`` and
        ``"cuda"`` are taken literally.

    Returns
    -------
    torch.device
        The device to train and extract features on.

    Raises
    ------
    ConfigError
        ``"cuda"`` was asked for but CUDA is not available, or the setting is unknown.
    """
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting == "cpu":
        return torch.device("cpu")
    if setting == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "CUDA was requested but is not available here; use 'auto' or 'cpu'", "device"
            )
        return torch.device("cuda")
    raise ConfigError(f"unknown device {setting!r}; expected 'auto', 'cpu' or 'cuda'", "device")


def draw_seed(generator: torch.Generator) -> int:
    """Draw a fresh integer seed in ``[0, 2**62)`` from a CPU ``torch.Generator``."""
    return int(torch.randint(0, _SEED_HIGH, (1,), generator=generator).item())


@contextmanager
def seeded_rng(generator: torch.Generator, device: torch.device | None = None) -> Iterator[None]:
    """Run a block with torch's global RNGs seeded from ``generator``, then restore them.

    One seed is drawn from ``generator`` (so the generator advances by one draw); the CPU
    default generator, and every CUDA device's generator when ``device`` is a CUDA
    device, are seeded with it inside the block. On exit the previous global states
    are restored (``torch.random.fork_rng``).

    Parameters
    ----------
    generator
        A CPU ``torch.Generator``; the only source of randomness.
    device
        The device the block computes on; CUDA generators are forked and seeded only
        when it is a CUDA device.
    """
    seed = draw_seed(generator)
    on_cuda = device is not None and device.type == "cuda"
    devices = list(range(torch.cuda.device_count())) if on_cuda else []
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        if on_cuda:
            torch.cuda.manual_seed_all(seed)
        yield

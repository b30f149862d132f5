"""Count device-to-host transfers of torch tensors (issue 27).

A transfer is any call that needs a tensor's values on the host: ``.item()``, ``.cpu()``,
``.numpy()``, ``.tolist()``, ``float(t)``, ``int(t)``, ``bool(t)`` (e.g. ``if t > 0``),
``np.asarray(t)``. On a GPU each one synchronises with the device and waits for every kernel
queued before it; on the CPU nothing moves, but the same calls are counted, so the count that
a CPU test sees is the count a GPU would pay (run the head with ``UNLEARNSIM_TORCH_GPU_PATH=1``
so that torch takes the GPU's code path, not its numpy fast paths).

The counter is a ``TorchFunctionMode``: torch calls it for every tensor method and function
while it is active; it records the names above and runs the call unchanged. ``t.cpu().numpy()``
is one transfer: a ``.numpy()`` (or ``np.asarray``) of a tensor that ``.cpu()`` just returned is
not counted again (on a GPU ``.numpy()`` of a device tensor raises, so the GPU path always goes
through ``.cpu()``). ``stacks`` keeps where each read came from, for the failure message.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.overrides import TorchFunctionMode

#: the tensor methods that read values back to the host
HOST_READS = frozenset(
    {
        "item",
        "cpu",
        "numpy",
        "tolist",
        "__float__",
        "__int__",
        "__bool__",
        "__index__",
        "__complex__",
        "__array__",
    }
)


class TransferCounter(TorchFunctionMode):
    """Counts host reads while active (``with TransferCounter() as c: ...; c.count``)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: Counter[str] = Counter()
        self.stacks: list[str] = []
        self._from_cpu: set[int] = set()

    @property
    def count(self) -> int:
        """Host reads seen so far."""
        return sum(self.by_name.values())

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = getattr(func, "__name__", "")
        result = func(*args, **(kwargs or {}))
        if name in HOST_READS:
            source = args[0] if args else None
            if name in ("numpy", "__array__") and id(source) in self._from_cpu:
                return result  # the .numpy() of a .cpu(): counted once, at the .cpu()
            self.by_name[name] += 1
            self.stacks.append(f"{name} at " + _caller())
            if name == "cpu":
                self._from_cpu.add(id(result))
        return result

    def report(self) -> str:
        """Every read and where it came from, one per line."""
        return "\n".join(self.stacks)


def _caller() -> str:
    """The innermost frames of the project (not torch, not this file) that made the read."""
    frames = [
        f"{Path(f.filename).name}:{f.lineno} {f.name}"
        for f in traceback.extract_stack()
        if "/simulator/" in f.filename or "/bench/" in f.filename
    ]
    return " <- ".join(reversed(frames[-3:]))

"""Named settings of a comparison: the certificate regime and the ``--quick`` profile.

Both are lists of scenario overrides (``key.path=value``, validated like ``--set``), applied
before the user's own ``--set`` items, so the exact command stays one line.

* ``REGIMES["paper"]``: nothing to override; the comparison scenarios carry the paper's regime
  (DecoRemoval Sec. 4.1: std sigma = 1, delta = 1e-3, about 1000 random features; lambda =
  1e-3, Guo et al.'s value, since the paper does not state its own).
* ``REGIMES["legacy"]``: the regime of the earlier comparison (sigma = 10, delta = 1e-4, 512
  random features), kept to reproduce it.
* ``QUICK``: tiny data for CI (at most 300 training and 100 test rows, one epoch, 64 random
  features, 5 decorrelation steps, checkpoints at 10 and 30 removals): it proves the pipeline
  end to end in seconds and measures nothing.
"""

from __future__ import annotations

REGIMES: dict[str, tuple[str, ...]] = {
    "paper": (),
    "legacy": ("head.sigma=10", "head.delta=1.0e-4", "rff.dim=512"),
}

QUICK: tuple[str, ...] = (
    "data.max_train=300",
    "data.max_test=100",
    "model.rounds=1",
    "model.local_epochs=1",
    "rff.dim=64",
    "decorrelation.steps=5",
    "decorrelation.features=8",
)
#: Removal counts the quick profile evaluates at.
QUICK_CHECKPOINTS: tuple[int, ...] = (10, 30)

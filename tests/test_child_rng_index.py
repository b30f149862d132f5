"""One seed-derivation scheme: ``child_rng``'s ``index`` draws what the evaluation drew before."""

import numpy as np
import pytest

from simulator.seeds import child_rng, child_seed


@pytest.mark.parametrize("name", ["shift", "shift_split"])
@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_indexed_child_rng_is_the_former_seed_sequence(name: str, seed: int) -> None:
    for index in range(4):
        before = np.random.default_rng(
            [child_seed(seed, name), index]
        )  # evaluation.py's former draw
        after = child_rng(seed, name, index=index)
        np.testing.assert_array_equal(before.random(64), after.random(64))
        np.testing.assert_array_equal(
            before.choice(1000, 50, replace=False), after.choice(1000, 50, replace=False)
        )


def test_index_is_not_a_name_path() -> None:
    assert child_rng(3, "shift", index=1).random() != child_rng(3, "shift", 1).random()
    assert child_rng(3, "shift").random() == np.random.default_rng(child_seed(3, "shift")).random()

"""The per-removal thread limits cover torch's pool as well as BLAS (the head on torch's CPU)."""

from __future__ import annotations

import pytest
from support.head_backend import twin_heads

from simulator.threads import all_blas_threads, single_threaded_blas, thread_limits

torch = pytest.importorskip("torch")
threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> int:
    infos = threadpoolctl.threadpool_info()
    return max(int(i["num_threads"]) for i in infos if i["user_api"] == "blas")


def test_single_removal_kernels_run_torch_on_one_thread_and_retrains_get_the_pool_back() -> None:
    with thread_limits(torch=2, blas=2):
        with single_threaded_blas():
            assert torch.get_num_threads() == 1
            assert _blas_threads() == 1
            with all_blas_threads():  # a retrain inside a single removal: level-3 work
                assert torch.get_num_threads() == 2
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with single_threaded_blas(False):
            assert torch.get_num_threads() == 2


def test_a_retrain_outside_any_limit_leaves_torch_as_the_user_set_it() -> None:
    with thread_limits(torch=1), all_blas_threads():
        assert torch.get_num_threads() == 1


def test_torch_head_removes_with_one_thread_and_keeps_the_pool_size_afterwards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, head = twin_heads("torch", accounting="guo", sigma=0.5, lam=1e-2)
    seen: list[int] = []
    norms = head._bk.norms  # every solve and every bound takes norms

    def recording(*args: object, **kwargs: object) -> object:
        seen.append(torch.get_num_threads())
        return norms(*args, **kwargs)

    with thread_limits(torch=2):
        monkeypatch.setattr(head._bk, "norms", recording)  # a spy: records, calls
        head.remove([0])
        assert torch.get_num_threads() == 2
    assert seen and set(seen) == {1}

"""File readers on files written here in the exact on-disk formats, plus malformed variants."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.data import (
    load_source,
    read_cifar10,
    read_csv_table,
    read_idx_dir,
    read_idx_images,
    read_idx_labels,
    read_sst2,
)
from simulator.data.images import FASHION_MNIST_DIR
from simulator.errors import ConfigError, InputError
from simulator.scenario import DataSpec


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray, magic: int, *, compress: bool) -> Path:
    data = idx_bytes(array, magic)
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.fixture
def images() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(7, 28, 28), dtype=np.uint8)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_round_trip(tmp_path: Path, images: np.ndarray, compress: bool) -> None:
    labels = np.array([0, 1, 2, 3, 4, 5, 9], dtype=np.uint8)
    suffix = ".gz" if compress else ""
    img = write_idx(tmp_path / f"a-idx3-ubyte{suffix}", images, 0x803, compress=compress)
    lab = write_idx(tmp_path / f"a-idx1-ubyte{suffix}", labels, 0x801, compress=compress)
    got = read_idx_images(img)
    assert got.dtype == np.uint8 and got.shape == (7, 28, 28)
    np.testing.assert_array_equal(got, images)
    got_labels = read_idx_labels(lab)
    assert got_labels.dtype == np.int64
    np.testing.assert_array_equal(got_labels, labels)


def test_idx_bad_magic_names_file(tmp_path: Path, images: np.ndarray) -> None:
    path = write_idx(tmp_path / "x-idx3-ubyte", images, 0x801 + 0x10000, compress=False)
    with pytest.raises(InputError, match=r"x-idx3-ubyte.*magic number 0x00010801"):
        read_idx_images(path)
    labels = write_idx(tmp_path / "y-idx1-ubyte", np.zeros(3), 0x801, compress=False)
    with pytest.raises(InputError, match="expected 0x00000803"):
        read_idx_images(labels)  # a label file is not an image file


def test_idx_truncated(tmp_path: Path, images: np.ndarray) -> None:
    data = idx_bytes(images, 0x803)
    (tmp_path / "cut-idx3-ubyte").write_bytes(data[:-100])
    with pytest.raises(InputError, match=r"cut-idx3-ubyte is truncated"):
        read_idx_images(tmp_path / "cut-idx3-ubyte")
    (tmp_path / "head").write_bytes(data[:10])
    with pytest.raises(InputError, match="truncated inside its header"):
        read_idx_images(tmp_path / "head")
    (tmp_path / "long").write_bytes(data + b"\x00")
    with pytest.raises(InputError, match="longer than its header says"):
        read_idx_images(tmp_path / "long")
    gz = gzip.compress(data)
    (tmp_path / "cut.gz").write_bytes(gz[: len(gz) // 2])
    with pytest.raises(InputError, match=r"cut.gz is a damaged or truncated gzip"):
        read_idx_images(tmp_path / "cut.gz")


def write_idx_dir(root: Path, n_train: int, n_test: int | None, rng: np.random.Generator) -> None:
    root.mkdir(parents=True, exist_ok=True)
    splits = [("train", n_train)] + ([("t10k", n_test)] if n_test else [])
    for prefix, n in splits:
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = np.arange(n) % 10
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", x, 0x803, compress=True)
        write_idx(root / f"{prefix}-labels-idx1-ubyte", y, 0x801, compress=False)


def test_idx_directory_and_source(tmp_path: Path) -> None:
    write_idx_dir(tmp_path / "d", 40, 20, np.random.default_rng(1))
    splits = read_idx_dir(tmp_path / "d")
    assert splits.x_train.shape == (40, 1, 28, 28) and splits.x_test is not None
    assert splits.x_test.shape == (20, 1, 28, 28)
    ds = load_source(DataSpec(source="idx", path=str(tmp_path / "d")), rng=np.random.default_rng(0))
    assert ds.modality == "image" and ds.image_shape == (1, 28, 28)
    assert ds.x_train.shape == (40, 784) and ds.x_test.shape == (20, 784)
    np.testing.assert_allclose(ds.x_train * 255, splits.x_train.reshape(40, -1), atol=1e-3)


def test_idx_directory_without_test_split_and_errors(tmp_path: Path) -> None:
    write_idx_dir(tmp_path / "d", 50, None, np.random.default_rng(1))
    ds = load_source(DataSpec(source="idx", path=str(tmp_path / "d")), rng=np.random.default_rng(0))
    assert ds.n_train == 40 and len(ds.y_test) == 10  # test_fraction 0.2, stratified
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="train-images-idx3-ubyte"):
        read_idx_dir(tmp_path / "empty")
    with pytest.raises(ValidationError, match="needs a path"):
        DataSpec(source="idx")
    # mismatched counts between images and labels
    write_idx(tmp_path / "d" / "train-labels-idx1-ubyte", np.zeros(3), 0x801, compress=False)
    with pytest.raises(InputError, match=r"50 images but .* 3 labels"):
        read_idx_dir(tmp_path / "d")


@pytest.mark.skipif(not FASHION_MNIST_DIR.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_real_fashion_mnist_files() -> None:
    x = read_idx_images(FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz")
    y = read_idx_labels(FASHION_MNIST_DIR / "train-labels-idx1-ubyte.gz")
    assert x.shape == (60000, 28, 28) and y.shape == (60000,)
    assert set(np.unique(y)) == set(range(10))
    ds = load_source(DataSpec(source="fashion_mnist"), rng=np.random.default_rng(0))
    assert ds.x_train.shape == (60000, 784) and ds.x_test.shape == (10000, 784)
    assert set(np.unique(ds.y_test)) == set(range(10))
    assert ds.x_train.min() >= 0.0 and ds.x_train.max() <= 1.0
    assert ds.class_names[0] == "T-shirt/top"


# ---------------------------------------------------------------- CIFAR-10


def write_cifar(root: Path, n: int, rng: np.random.Generator) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, size=n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            b"filenames": [f"{i}.png".encode() for i in range(n)],
        }
        blob = pickle.dumps(batch, protocol=2)
        if name == "data_batch_1":  # as the real (Python 2, numpy 1) files name the class
            blob = blob.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
            assert b"numpy.core.multiarray\n_reconstruct" in blob
        (root / name).write_bytes(blob)
    with (root / "batches.meta").open("wb") as fh:
        names = [b"airplane", b"car", b"bird", b"cat", b"deer"]
        names += [b"dog", b"frog", b"horse", b"ship", b"truck"]
        pickle.dump({b"label_names": names, b"num_vis": 3072}, fh, protocol=2)


def test_cifar10_reader_and_source(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    write_cifar(root, 6, np.random.default_rng(2))
    splits = read_cifar10(root)
    assert splits.x_train.shape == (30, 3, 32, 32) and splits.x_test is not None
    assert splits.x_test.shape == (6, 3, 32, 32)
    assert splits.class_names[1] == "car"
    with (root / "data_batch_2").open("rb") as fh:
        raw = pickle.load(fh, encoding="bytes")
    # channel-first: the first 1024 bytes of a row are the red plane
    np.testing.assert_array_equal(splits.x_train[6, 0].ravel(), raw[b"data"][0, :1024])
    ds = load_source(DataSpec(source="cifar10", path=str(root)), rng=np.random.default_rng(0))
    assert ds.image_shape == (3, 32, 32) and ds.x_train.shape == (30, 3072)
    np.testing.assert_allclose(ds.x_test[0] * 255, raw_test_row(root), atol=1e-3)


def raw_test_row(root: Path) -> np.ndarray:
    with (root / "test_batch").open("rb") as fh:
        return np.asarray(pickle.load(fh, encoding="bytes")[b"data"][0], dtype=np.float32)


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pwned",))


def test_cifar10_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    write_cifar(root, 2, np.random.default_rng(3))
    (root / "data_batch_4").unlink()
    with pytest.raises(InputError, match="data_batch_4 is missing"):
        read_cifar10(root)
    write_cifar(root, 2, np.random.default_rng(3))
    with (root / "data_batch_3").open("wb") as fh:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, fh)
    with pytest.raises(InputError, match=r"data_batch_3.*expected uint8 \(n, 3072\)"):
        read_cifar10(root)
    with (root / "data_batch_3").open("wb") as fh:
        pickle.dump({b"data": Evil(), b"labels": [0]}, fh)
    with pytest.raises(InputError, match=r"refusing to load global builtins\.print"):
        read_cifar10(root)
    assert "pwned" not in capsys.readouterr().out
    (root / "data_batch_3").write_bytes(b"\x80\x02}q\x00")  # truncated pickle
    with pytest.raises(InputError, match="data_batch_3 is not a valid batch pickle"):
        read_cifar10(root)


# ---------------------------------------------------------------- SST-2


def write_sst2(root: Path) -> None:
    root.mkdir()
    train = ["sentence\tlabel", "a gorgeous , witty film \t1", 'the "plot" is a mess\t0']
    train += [f"film number {i} is {'great' if i % 2 else 'awful'}\t{i % 2}" for i in range(18)]
    (root / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    dev = ["sentence\tlabel", "it 's a charming journey .\t1", "tedious and dull\t0"]
    (root / "dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")
    (root / "test.tsv").write_text("index\tsentence\n0\tno labels here\n", encoding="utf-8")


def test_sst2_reader_and_source(tmp_path: Path) -> None:
    write_sst2(tmp_path / "SST-2")
    splits = read_sst2(tmp_path / "SST-2")
    assert len(splits.x_train) == 20 and splits.x_train[1] == 'the "plot" is a mess'
    assert splits.y_train[:2].tolist() == [1, 0]
    assert splits.x_test == ("it 's a charming journey .", "tedious and dull")
    spec = DataSpec.model_validate({
        "source": "sst2", "path": str(tmp_path / "SST-2"),
        "text": {"representation": "tokens", "max_len": 6, "vocab_size": 10},
    })  # fmt: skip
    ds = load_source(spec, rng=np.random.default_rng(0))
    assert ds.modality == "tokens" and ds.x_train.shape == (20, 6) and ds.x_test.shape == (2, 6)
    assert ds.x_train.dtype == np.int64 and ds.vocab_size == 12


def test_sst2_malformed(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    with pytest.raises(InputError, match=r"has no train\.tsv"):
        read_sst2(root)
    (root / "train.tsv").write_text("text\tlabel\nhello\t1\n")
    with pytest.raises(InputError, match="header with 'sentence' and 'label'"):
        read_sst2(root)
    (root / "train.tsv").write_text("sentence\tlabel\nhello\t1\nworld\tpositive\n")
    with pytest.raises(InputError, match=r"train.tsv:3: .*label 0/1"):
        read_sst2(root)


# ---------------------------------------------------------------- CSV


def test_csv_reader_and_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    n = 60
    lines = ["age,city,score,target"]
    for i in range(n):
        city = ["paris", "rome", "oslo"][i % 3]
        age = "" if i == 5 else str(20 + i)
        lines.append(f"{age},{city},{rng.normal():.4f},{['lo', 'mid', 'hi'][i % 3]}")
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    table = read_csv_table(path, "target")
    assert table.label_names == ("hi", "lo", "mid")  # sorted values -> 0..k-1
    assert table.labels[:3].tolist() == [1, 2, 0]
    assert list(table.features.columns) == ["age", "city", "score"]
    ds = load_source(
        DataSpec(source="csv", path=str(path), label_column="target"), rng=np.random.default_rng(0)
    )
    assert ds.modality == "tabular" and ds.num_classes == 3
    assert ds.x_train.shape == (48, 5) and ds.x_test.shape == (12, 5)  # 2 numeric + 3 one-hot
    assert np.isfinite(ds.x_train).all()
    np.testing.assert_allclose(ds.x_train[:, :2].mean(axis=0), 0.0, atol=1e-5)  # train-fitted
    np.testing.assert_allclose(ds.x_train[:, 2:].sum(axis=1), 1.0)


def test_csv_missing_label_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(ConfigError, match=r"label column 'y' not in .*columns found: \['a', 'b'\]"):
        read_csv_table(path, "y")
    with pytest.raises(ValidationError, match="needs label_column"):
        DataSpec(source="csv", path=str(path))
    path.write_text("a,y\n1,\n3,1\n")
    with pytest.raises(InputError, match="1 row"):
        read_csv_table(path, "y")
    with pytest.raises(InputError, match="cannot read CSV"):
        read_csv_table(tmp_path / "absent.csv", "y")

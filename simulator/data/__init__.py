"""Datasets for unlearnsim: sources, readers, a synthetic generator, client partitions, shifts.

The entry point is :func:`load_source` (given the scenario's ``data`` section, a
:class:`~simulator.scenario.DataSpec`); every source returns the same :class:`Dataset`.
"""

from simulator.data.cifar import read_cifar10
from simulator.data.dataset import Dataset, Modality
from simulator.data.embeddings import EmbeddedText, embed_sentences
from simulator.data.idx import read_idx_dir, read_idx_images, read_idx_labels
from simulator.data.image_splits import ImageSplits
from simulator.data.partition import partition
from simulator.data.shift import (
    OODSplit,
    ShiftedSet,
    ShiftKind,
    apply_shift,
    class_prior_shift,
    gaussian_noise,
    label_swap_test,
    rotate_images,
)
from simulator.data.sources import known_sources, load_source
from simulator.data.synthetic import SyntheticTruth, make_synthetic, synthetic_truth
from simulator.data.tabular import LabelledTable, read_csv_table
from simulator.data.text import TextSplits, read_rotten_tomatoes, read_sst2

__all__ = [
    "Dataset",
    "EmbeddedText",
    "ImageSplits",
    "LabelledTable",
    "Modality",
    "OODSplit",
    "ShiftKind",
    "ShiftedSet",
    "SyntheticTruth",
    "TextSplits",
    "apply_shift",
    "class_prior_shift",
    "embed_sentences",
    "gaussian_noise",
    "known_sources",
    "label_swap_test",
    "load_source",
    "make_synthetic",
    "partition",
    "read_cifar10",
    "read_csv_table",
    "read_idx_dir",
    "read_idx_images",
    "read_idx_labels",
    "read_rotten_tomatoes",
    "read_sst2",
    "rotate_images",
    "synthetic_truth",
]

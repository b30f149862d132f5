"""One label space: scenario class ids are the source's own labels, mapped here to class indices.

A source labels its classes with its own integer ids: the label values of its files (MNIST and
Fashion-MNIST digits ``0..9``, CIFAR-10 ``0..9``, SST-2 ``0/1``) or, for tables, the position of
each distinct label value in sorted order. Every class id a scenario names (``data.classes``,
``stream.phases.*.target.class_id``, ``ood.source_class``/``target_class``) is such a source
label. A loaded :class:`~simulator.data.dataset.Dataset` numbers its classes ``0..k-1`` (the
order of ``data.classes``) and records in ``Dataset.class_labels`` the source label of each
index; :func:`class_index` is the one translation from an id to an index, and it refuses an id
that is not one of the dataset's classes instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulator.errors import ConfigError


def class_index(class_labels: Sequence[int], class_id: int, location: str) -> int:
    """The class index ``k`` whose source label ``class_labels[k]`` is ``class_id``.

    Parameters
    ----------
    class_labels : sequence of int
        The source label of each class index (``Dataset.class_labels``).
    class_id : int
        A scenario class id (a source label).
    location : str
        The scenario key that gave ``class_id`` (named in the error).

    Returns
    -------
    int
        ``k`` in ``0..len(class_labels) - 1``.

    Raises
    ------
    ConfigError
        ``class_id`` is not the label of any class of the dataset.

    Examples
    --------
    >>> class_index((7, 0, 6, 2), 6, "ood.target_class")
    2
    """
    labels = [int(c) for c in class_labels]
    if int(class_id) not in labels:
        raise ConfigError(
            f"class id {class_id} is not one of the task's classes (source labels {labels})",
            location,
        )
    return labels.index(int(class_id))

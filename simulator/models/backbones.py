"""Small feature extractors (the ``x -> h`` part of DecoRemoval's model split).

The paper (``decoremoval.tex``, Sec. "Backbones" and Table "Backbones") compares MLP,
LSTM and Transformer extractors; ``notes/method.md`` section 1 fixes the split
``x --extractor--> h --RFF--> z --linear head--> logits``. Only the linear head is
removed from with a certificate; the extractor here is trained once, with a
*temporary* linear layer (:class:`ExtractorWithHead`), and then frozen.

Every extractor ends in ``tanh``, so features lie in ``[-1, 1]``: the RFF bandwidth
``sigma`` then has a fixed scale, and row normalisation (``||x|| <= 1`` in Guo et al.
2020) never divides by a huge norm. Token models take int64 ids ``(n, seq_len)``;
pad tokens are moved out of the way (non-pad tokens keep their order) before the
sequence model runs, so where and how much padding a row carries does not change h.
Parameters are initialised inside :func:`~simulator.models.device.seeded_rng`, so
the same generator seed gives bit-identical weights and torch's global RNG is left
untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from simulator.errors import ConfigError, InputError
from simulator.models.device import seeded_rng

BackboneKind = Literal["mlp", "lstm", "transformer", "identity"]
InputKind = Literal["float", "tokens"]


class Backbone(nn.Module):
    """Base class: maps a batch of inputs to features ``h`` of shape ``(n, feature_dim)``."""

    feature_dim: int
    input_kind: InputKind


def _positive(value: int, location: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a positive integer, got {value!r}", location)
    return value


def _dropout(value: float, location: str = "backbone.dropout") -> float:
    if not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"must lie in [0, 1), got {value!r}", location)
    return float(value)


def _float_rows(x: Tensor, input_dim: int) -> Tensor:
    """Flatten ``(n, ...)`` float (or integer image) input to ``(n, input_dim)`` float32."""
    if x.dim() < 2:
        raise InputError(f"expected a batch of shape (n, ...), got shape {tuple(x.shape)}")
    rows = x.flatten(1)
    if rows.shape[1] != input_dim:
        raise InputError(f"expected {input_dim} input features per row, got {rows.shape[1]}")
    return rows.to(torch.float32)


@dataclass(frozen=True)
class CompactTokens:
    """Token rows with their non-pad tokens moved to the front (order kept).

    ``tokens`` is cut to the longest row, ``mask`` marks real tokens and ``lengths``
    counts them per row.
    """

    tokens: Tensor
    mask: Tensor
    lengths: Tensor


def check_tokens(x: Tensor, vocab_size: int) -> Tensor:
    """Validate int token ids ``(n, seq_len)`` in ``[0, vocab_size)``; return them as int64."""
    if x.dim() != 2 or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise InputError(
            f"expected integer token ids of shape (n, seq_len), got {x.dtype} {tuple(x.shape)}"
        )
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= vocab_size):
        raise InputError(f"token ids must lie in [0, {vocab_size})")
    return x.long()


def compact_tokens(tokens: Tensor, pad_id: int) -> CompactTokens:
    """Move non-pad tokens to the front of each row (stable) and drop all-pad columns."""
    mask = tokens != pad_id
    order = torch.argsort((~mask).to(torch.int32), dim=1, stable=True)
    lengths = mask.sum(dim=1)
    width = max(int(lengths.max()) if lengths.numel() else 0, 1)
    packed = torch.gather(tokens, 1, order)[:, :width]
    kept = torch.arange(width, device=tokens.device)[None, :] < lengths[:, None]
    return CompactTokens(packed, kept, lengths)


def masked_mean(values: Tensor, seq: CompactTokens) -> Tensor:
    """Mean of ``values`` ``(n, width, d)`` over real tokens; zero for rows without any."""
    total = (values * seq.mask[:, :, None].to(values.dtype)).sum(dim=1)
    return total / seq.lengths.clamp(min=1)[:, None].to(values.dtype)


class MLPBackbone(Backbone):
    """``[Linear -> ReLU -> Dropout] * len(hidden) -> Linear -> tanh`` on flattened rows.

    For tabular rows, flattened images (any ``(n, ...)`` shape whose trailing
    dimensions multiply to ``input_dim``) and sentence embeddings.
    """

    def __init__(
        self,
        input_dim: int,
        hidden: tuple[int, ...],
        feature_dim: int,
        dropout: float = 0.0,
        *,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.input_dim = _positive(input_dim, "backbone.input_dim")
        self.feature_dim = _positive(feature_dim, "backbone.feature_dim")
        self.input_kind = "float"
        p = _dropout(dropout)
        layers: list[nn.Module] = []
        width = self.input_dim
        with seeded_rng(generator):
            for i, size in enumerate(hidden):
                layers += [nn.Linear(width, _positive(size, f"backbone.hidden[{i}]")), nn.ReLU()]
                layers.append(nn.Dropout(p))
                width = size
            layers.append(nn.Linear(width, self.feature_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Features ``tanh(MLP(x))`` of shape ``(n, feature_dim)``."""
        out: Tensor = self.net(_float_rows(x, self.input_dim))
        return torch.tanh(out)


class IdentityBackbone(Backbone):
    """Pass-through of float features (``feature_dim = input_dim``); no parameters."""

    def __init__(self, input_dim: int) -> None:
        super().__init__()
        self.input_dim = _positive(input_dim, "backbone.input_dim")
        self.feature_dim = self.input_dim
        self.input_kind = "float"

    def forward(self, x: Tensor) -> Tensor:
        """The input rows, flattened and cast to float32."""
        return _float_rows(x, self.input_dim)


@dataclass(frozen=True)
class TokenInput:
    """What a token backbone reads: the vocabulary size, its padding id, the longest row."""

    vocab_size: int
    pad_id: int = 0
    max_len: int | None = None

    def __post_init__(self) -> None:
        _positive(self.vocab_size, "backbone.vocab_size")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ConfigError(
                f"pad_id {self.pad_id} outside [0, {self.vocab_size})", "backbone.pad_id"
            )


class TokenBackbone(Backbone):
    """Base class of the backbones that read int token ids ``(n, seq_len)``."""

    vocab_size: int
    pad_id: int

    def _read_tokens(self, spec: BackboneConfig, tokens: TokenInput) -> None:
        self.vocab_size = tokens.vocab_size
        self.pad_id = tokens.pad_id
        self.feature_dim = spec.feature_dim
        self.input_kind = "tokens"


class LSTMBackbone(TokenBackbone):
    """Embedding -> LSTM -> mean of outputs over non-pad tokens -> Linear -> tanh."""

    def __init__(
        self, spec: BackboneConfig, tokens: TokenInput, *, generator: torch.Generator
    ) -> None:
        super().__init__()
        self._read_tokens(spec, tokens)
        if len(spec.hidden) != 1:
            raise ConfigError("an lstm backbone takes one hidden width", "backbone.hidden")
        hidden = spec.hidden[0]
        p = _dropout(spec.dropout)
        with seeded_rng(generator):
            self.embed = nn.Embedding(self.vocab_size, spec.embed_dim, padding_idx=self.pad_id)
            self.lstm = nn.LSTM(
                spec.embed_dim,
                hidden,
                num_layers=spec.layers,
                batch_first=True,
                dropout=p if spec.layers > 1 else 0.0,
            )
            self.proj = nn.Linear(hidden, self.feature_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Features of shape ``(n, feature_dim)`` from int token ids ``(n, seq_len)``."""
        seq = compact_tokens(check_tokens(x, self.vocab_size), self.pad_id)
        out, _ = self.lstm(self.embed(seq.tokens))
        return torch.tanh(self.proj(masked_mean(out, seq)))


class TransformerBackbone(TokenBackbone):
    """Tiny pre-LN Transformer encoder with learned positions, mean-pooled over non-pad tokens.

    The feed-forward width is ``2 * embed_dim``. Rows with no token at all pool to
    zero before the final ``Linear -> tanh``.
    """

    def __init__(
        self, spec: BackboneConfig, tokens: TokenInput, *, generator: torch.Generator
    ) -> None:
        super().__init__()
        self._read_tokens(spec, tokens)
        embed_dim, heads = spec.embed_dim, spec.heads
        if embed_dim % heads:
            raise ConfigError(
                f"embed_dim {embed_dim} is not divisible by heads {heads}", "backbone.heads"
            )
        if tokens.max_len is None:
            raise ConfigError("a transformer backbone needs max_len", "backbone.max_len")
        self.max_len = _positive(tokens.max_len, "backbone.max_len")
        with seeded_rng(generator):
            self.embed = nn.Embedding(self.vocab_size, embed_dim, padding_idx=self.pad_id)
            self.position = nn.Embedding(self.max_len, embed_dim)
            layer = nn.TransformerEncoderLayer(
                embed_dim,
                heads,
                dim_feedforward=2 * embed_dim,
                dropout=_dropout(spec.dropout),
                batch_first=True,
                norm_first=True,
            )
            self.encoder = nn.TransformerEncoder(
                layer,
                spec.layers,
                norm=nn.LayerNorm(embed_dim),
                enable_nested_tensor=False,
            )
            self.proj = nn.Linear(embed_dim, self.feature_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Features of shape ``(n, feature_dim)`` from int token ids ``(n, seq_len)``."""
        seq = compact_tokens(check_tokens(x, self.vocab_size), self.pad_id)
        width = seq.tokens.shape[1]
        if width > self.max_len:
            raise InputError(f"a row has {width} non-pad tokens; max_len is {self.max_len}")
        positions = torch.arange(width, device=seq.tokens.device)
        hidden = self.embed(seq.tokens) + self.position(positions)[None, :, :]
        attend = seq.mask.clone()
        attend[:, 0] |= seq.lengths == 0  # an all-pad row attends to one token, not to none
        out: Tensor = self.encoder(hidden, src_key_padding_mask=~attend)
        return torch.tanh(self.proj(masked_mean(out, seq)))


@dataclass(frozen=True)
class BackboneConfig:
    """What extractor to build (the ``backbone`` block of a scenario)."""

    kind: BackboneKind
    feature_dim: int = 64
    hidden: tuple[int, ...] = (128,)
    embed_dim: int = 64
    heads: int = 2
    layers: int = 1
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in get_args(BackboneKind):
            raise ConfigError(
                f"unknown kind {self.kind!r}; expected one of {get_args(BackboneKind)}",
                "backbone.kind",
            )
        object.__setattr__(self, "hidden", tuple(self.hidden))
        for name in ("feature_dim", "embed_dim", "heads", "layers"):
            _positive(getattr(self, name), f"backbone.{name}")
        for i, size in enumerate(self.hidden):
            _positive(size, f"backbone.hidden[{i}]")
        _dropout(self.dropout)


def build_backbone(
    spec: BackboneConfig,
    *,
    input_dim: int | None,
    vocab_size: int | None,
    max_len: int | None,
    generator: torch.Generator,
    pad_id: int = 0,
) -> Backbone:
    """Build the extractor ``spec`` describes, initialised from ``generator``.

    ``mlp`` and ``identity`` need ``input_dim``; ``lstm`` and ``transformer`` need
    ``vocab_size``; ``transformer`` also needs ``max_len``. The LSTM uses ``hidden[0]``
    as its width and ``layers`` stacked layers.

    Raises
    ------
    ConfigError
        A required size is missing, or the spec does not fit the kind.
    """

    def need(value: int | None, name: str) -> int:
        if value is None:
            raise ConfigError(f"a {spec.kind} backbone needs {name}", f"backbone.{name}")
        return value

    if spec.kind == "identity":
        return IdentityBackbone(need(input_dim, "input_dim"))
    if spec.kind == "mlp":
        return MLPBackbone(
            need(input_dim, "input_dim"),
            spec.hidden,
            spec.feature_dim,
            spec.dropout,
            generator=generator,
        )
    if spec.kind == "lstm":
        tokens = TokenInput(need(vocab_size, "vocab_size"), pad_id)
        return LSTMBackbone(spec, tokens, generator=generator)
    tokens = TokenInput(need(vocab_size, "vocab_size"), pad_id, need(max_len, "max_len"))
    return TransformerBackbone(spec, tokens, generator=generator)


class ExtractorWithHead(nn.Module):
    """A backbone plus a temporary linear classifier, used only to train the extractor.

    The certified head of DecoRemoval is trained separately on the frozen features
    (``notes/method.md`` section 1); this layer is discarded after extractor training.
    ``input_kind`` (what the backbone takes) and ``feature_dim`` (the width of ``h``) are the
    backbone's.
    """

    input_kind: InputKind
    feature_dim: int

    def __init__(self, backbone: Backbone, num_classes: int, *, generator: torch.Generator) -> None:
        super().__init__()
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ConfigError(f"need at least 2 classes, got {num_classes!r}", "num_classes")
        self.backbone = backbone
        self.num_classes = num_classes
        self.input_kind = backbone.input_kind
        self.feature_dim = backbone.feature_dim
        with seeded_rng(generator):
            self.head = nn.Linear(backbone.feature_dim, num_classes)

    def features(self, x: Tensor) -> Tensor:
        """The extractor's features ``h`` of shape ``(n, feature_dim)``."""
        h: Tensor = self.backbone(x)
        return h

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(n, num_classes)`` of the temporary head."""
        logits: Tensor = self.head(self.features(x))
        return logits


def build_network(
    spec: BackboneConfig,
    x: NDArray[Any],
    *,
    tokens: bool,
    vocab_size: int | None,
    num_classes: int,
    generator: torch.Generator,
) -> ExtractorWithHead:
    """The extractor ``spec`` describes for inputs shaped like ``x``, plus a linear classifier.

    Token inputs (``tokens``) are ``(n, max_len)`` ids of a ``vocab_size`` vocabulary; any other
    input is flattened to ``prod(x.shape[1:])`` features. Both parts are initialised from
    ``generator``, the backbone first.
    """
    backbone = build_backbone(
        spec,
        input_dim=None if tokens else int(np.prod(x.shape[1:])),
        vocab_size=vocab_size,
        max_len=int(x.shape[1]) if tokens else None,
        generator=generator,
    )
    return ExtractorWithHead(backbone, num_classes, generator=generator)

"""Which cross-attention heads of Whisper's decoder follow the audio in time (word timestamps).

`ALIGNMENT_HEADS` is data from `whisper/__init__.py` (`_ALIGNMENT_HEADS`) of the PyPI package
**openai-whisper 20250625** (https://github.com/openai/whisper), MIT licence, Copyright (c) 2022 OpenAI
(the licence text is in assets/README.md). Each entry is a boolean (n_text_layer, n_text_head) mask in
C order, gzip-compressed and base85-encoded, for openai's released checkpoint of that name. A checkpoint
without an entry uses upstream's default: every head of the last half of the decoder layers.

Our `Whisper` holds no alignment heads: callers get them here and pass them to `timing.find_alignment`.
"""

from __future__ import annotations

import base64
import gzip

import numpy as np
import torch

ALIGNMENT_HEADS: dict[str, bytes] = {
    "tiny.en": b"ABzY8J1N>@0{>%R00Bk>$p{7v037`oCl~+#00",
    "tiny": b"ABzY8bu8Lr0{>%RKn9Fp%m@SkK7Kt=7ytkO",
    "base.en": b"ABzY8;40c<0{>%RzzG;p*o+Vo09|#PsxSZm00",
    "base": b"ABzY8KQ!870{>%RzyTQH3`Q^yNP!>##QT-<FaQ7m",
    "small.en": b"ABzY8>?_)10{>%RpeA61k&I|OI3I$65C{;;pbCHh0B{qLQ;+}v00",
    "small": b"ABzY8DmU6=0{>%Rpa?J`kvJ6qF(V^F86#Xh7JUGMK}P<N0000",
    "medium.en": b"ABzY8usPae0{>%R7<zz_OvQ{)4kMa0BMw6u5rT}kRKX;$NfYBv00*Hl@qhsU00",
    "medium": b"ABzY8B0Jh+0{>%R7}kK1fFL7w6%<-Pf*t^=N)Qr&0RR9",
    "large-v1": b"ABzY8r9j$a0{>%R7#4sLmoOs{s)o3~84-RPdcFk!JR<kSfC2yj",
    "large-v2": b"ABzY8zd+h!0{>%R7=D0pU<_bnWW*tkYAhobTNnu$jnkEkXqp)j;w1Tzk)UH3X%SZd&fFZ2fC2yj",
    "large-v3": b"ABzY8gWO1E0{>%R7(9S+Kn!D~%ngiGaR?*L!iJG9p-nab0JQ=-{D1-g00",
    "large": b"ABzY8gWO1E0{>%R7(9S+Kn!D~%ngiGaR?*L!iJG9p-nab0JQ=-{D1-g00",
    "large-v3-turbo": b"ABzY8j^C+e0{>%RARaKHP%t(lGR*)0g!tONPyhe`",
    "turbo": b"ABzY8j^C+e0{>%RARaKHP%t(lGR*)0g!tONPyhe`",
}


def _layers_and_heads(model_or_dims) -> tuple[int, int]:
    dims = getattr(model_or_dims, "dims", model_or_dims)
    try:
        return int(dims.n_text_layer), int(dims.n_text_head)
    except AttributeError:
        raise TypeError(f"expected a Whisper model or its dims, not {type(model_or_dims).__name__}") from None


def default_alignment_heads(model_or_dims) -> torch.Tensor:
    """Upstream's default: all heads of the decoder layers from n_text_layer // 2 on (sparse bool)."""
    layers, n_heads = _layers_and_heads(model_or_dims)
    mask = torch.zeros(layers, n_heads, dtype=torch.bool)
    mask[layers // 2:] = True
    return mask.to_sparse()


def decode_alignment_heads(dump: bytes, model_or_dims) -> torch.Tensor:
    """A base85 + gzip mask (upstream's `set_alignment_heads` format) as a sparse bool tensor."""
    layers, n_heads = _layers_and_heads(model_or_dims)
    flags = np.frombuffer(gzip.decompress(base64.b85decode(dump)), dtype=bool)
    if flags.size != layers * n_heads:
        raise ValueError(f"the alignment-head mask holds {flags.size} flags; this decoder has "
                         f"{layers} layers x {n_heads} heads = {layers * n_heads}")
    return torch.from_numpy(flags.copy()).reshape(layers, n_heads).to_sparse()


def alignment_heads(model_or_dims, name: str | None = None) -> torch.Tensor:
    """The (n_text_layer, n_text_head) sparse bool mask of the heads `find_alignment` reads.

    `name` is an openai model name ("tiny.en", "base", ..., "large-v3", "turbo"): its table entry is
    used. Any other name, or none (a fine-tuned or converted checkpoint), gives upstream's default,
    the last half of the decoder layers with all their heads.
    """
    if name is not None and name in ALIGNMENT_HEADS:
        return decode_alignment_heads(ALIGNMENT_HEADS[name], model_or_dims)
    return default_alignment_heads(model_or_dims)

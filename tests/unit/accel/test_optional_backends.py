"""The optional kernels (flash-attn, xFormers, SageAttention 2/3) on the CPU, through fake kernels.

None of the packages can run here, so each test puts a fake on a fresh backend instance: plain torch
that follows the real kernel's documented semantics (layout, GQA, causal alignment, window, padding,
scale, in-place habits) and checks what the real one would refuse (strides, head dims, bias
alignment). The backend's run() must then match SDPA with the equivalent dense mask.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from mizuoto.runtime.accel.backends import REGISTRY, base
from mizuoto.runtime.accel.backends import sage as sage_module
from mizuoto.runtime.accel.backends.flash_attn import FlashAttn
from mizuoto.runtime.accel.backends.layout import on_device
from mizuoto.runtime.accel.backends.sage import Sage, Sage3
from mizuoto.runtime.accel.backends.xformers import Xformers, xformers_for_torch
from mizuoto.runtime.accel.call import Args, Call
from mizuoto.runtime.accel.mask import MaskInfo

# -- helpers ---------------------------------------------------------------------------------------


def qkv(b=2, hq=4, hk=None, n_q=5, n_k=None, d=16, dv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    hk, n_k, dv = hk or hq, n_k or n_q, dv or d
    return (torch.randn(b, hq, n_q, d, generator=g), torch.randn(b, hk, n_k, d, generator=g),
            torch.randn(b, hk, n_k, dv, generator=g))


def args(mask=None, causal=False, scale=None, gqa=False, dropout_p=0.0, mask_info=None) -> Args:
    return Args(mask, causal, scale, gqa, dropout_p, mask_info)


def reference(q, k, v, a: Args, mask=None):
    """SDPA with the dense mask (`mask` overrides a.mask: MaskInfo.dense for structured calls)."""
    mask = a.mask if mask is None else mask
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=a.causal, scale=a.scale,
                                          enable_gqa=q.shape[1] != k.shape[1])


def run_untouched(backend, q, k, v, a: Args):
    """backend.run, checking it leaves every input exactly as it was."""
    before = [x.clone() for x in (q, k, v)]
    out = backend.run(q, k, v, a)
    for x, y in zip((q, k, v), before, strict=True):
        assert torch.equal(x, y), "run() mutated its input"
    assert out.shape == (*q.shape[:-1], v.shape[-1])
    assert out.dtype == q.dtype
    return out


def close(out, expected):
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def gpu_call(q, k, v, a: Args) -> Call:
    """The Call these CPU tensors would make as fp16 on an H200."""
    return Call.of(q, k, v, a, False)._replace(device="cuda", capability=(9, 0), dtype="float16")


def call(**changes) -> Call:
    base_call = dict(device="cuda", capability=(9, 0), dtype="float16", head_dim=64, value_dim=64, gqa=False,
                     single_query=False, equal_lengths=True, long_queries=False, mask="none", mask_info=None,
                     custom_scale=False, causal=False, dropout=False, grad=False, wide_grid=False)
    return Call(**{**base_call, **changes})


# -- fake flash-attn -------------------------------------------------------------------------------


def flash_math(q, k, v, scale, causal, window, seqlens=None, leftpad=None):
    """FlashAttention-2 in plain torch: (B, L, H, D); kv head h // (Hq / Hk); row b's keys are
    [leftpad_b, seqlens_b); causality and window are aligned to the end of the row's keys
    (bottom-right); a row with no key gives 0."""
    b, n_q, h, _ = q.shape
    n_k = k.shape[1]
    k, v = (x.repeat_interleave(h // x.shape[2], dim=2) for x in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    start = torch.zeros(b, dtype=torch.long) if leftpad is None else leftpad.long()
    end = torch.full((b,), n_k) if seqlens is None else seqlens.long()
    j = torch.arange(n_k)[None, None, :] - start[:, None, None]  # key index within the row's keys
    length = (end - start)[:, None, None]
    diagonal = torch.arange(n_q)[None, :, None] + length - n_q
    left, right = window
    if causal:
        right = 0
    allowed = ((j >= 0) & (j < length)).expand(b, n_q, n_k)
    if left >= 0:
        allowed = allowed & (j >= diagonal - left)
    if right >= 0:
        allowed = allowed & (j <= diagonal + right)
    probs = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)


class FakeFlash:
    def __init__(self):
        self.calls = []

    @staticmethod
    def _check(q, k, v):
        assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1, "contiguous last dim"
        assert q.shape[-1] == k.shape[-1] == v.shape[-1] <= 256
        assert q.shape[2] % k.shape[2] == 0

    def func(self, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
             alibi_slopes=None, deterministic=False, return_attn_probs=False):
        self._check(q, k, v)
        self.calls.append(dict(kind="func", q=q, k=k, dropout_p=dropout_p, scale=softmax_scale, causal=causal))
        scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
        return flash_math(q, k, v, scale, causal, window_size)

    def with_kvcache(self, q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                     cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                     window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                     return_softmax_lse=False):
        assert k is None and v is None, "new keys would be written into the caller's k_cache/v_cache"
        self._check(q, k_cache, v_cache)
        if isinstance(cache_seqlens, int):
            cache_seqlens = torch.full((k_cache.shape[0],), cache_seqlens, dtype=torch.int32)
        for t in (cache_seqlens, cache_leftpad):
            assert t is None or (t.dtype == torch.int32 and t.is_contiguous() and t.shape == (q.shape[0],))
        self.calls.append(dict(kind="kvcache", q=q, k=k_cache, scale=softmax_scale, causal=causal,
                               window=window_size, seqlens=cache_seqlens, leftpad=cache_leftpad))
        scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
        return flash_math(q, k_cache, v_cache, scale, causal, window_size, cache_seqlens, cache_leftpad)


def flash_backend():
    fake, backend = FakeFlash(), FlashAttn()
    backend._flash_attn_func, backend._flash_attn_with_kvcache = fake.func, fake.with_kvcache
    return backend, fake


# -- fake xFormers ---------------------------------------------------------------------------------


def causal_bias(n_q, n_k, bottom_right=False, window=None):
    """xFormers' _materialize_causal_mask: tril(shift), then triu(shift - window + 1), as 0 / -inf."""
    shift = n_k - n_q if bottom_right else 0
    keep = torch.ones(n_q, n_k).tril(shift)
    if window is not None:
        keep = keep.triu(shift - window + 1)
    return keep.log()


class LowerTriangularMask:
    def materialize(self, shape):
        return causal_bias(*shape[-2:])


class LowerTriangularFromBottomRightMask:
    def materialize(self, shape):
        return causal_bias(*shape[-2:], bottom_right=True)

    def make_local_attention(self, window_size):
        return LowerTriangularFromBottomRightLocalAttentionMask(window_size)


class LowerTriangularFromBottomRightLocalAttentionMask(LowerTriangularFromBottomRightMask):
    def __init__(self, window_size):
        assert window_size > 0
        self._window_size = window_size

    def materialize(self, shape):
        return causal_bias(*shape[-2:], bottom_right=True, window=self._window_size)


ATTN_BIAS = SimpleNamespace(LowerTriangularMask=LowerTriangularMask,
                            LowerTriangularFromBottomRightMask=LowerTriangularFromBottomRightMask,
                            LowerTriangularFromBottomRightLocalAttentionMask=LowerTriangularFromBottomRightLocalAttentionMask)


class FakeXformers:
    def __init__(self):
        self.calls = []

    def memory_efficient_attention(self, query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                                   output_dtype=None):
        five_d = query.dim() == 5
        if five_d:  # [B, M, G, H, K]: K/V must already be expanded over H
            groups, per_group = query.shape[2:4]
            assert key.shape[2:4] == (groups, per_group) and value.shape[:4] == key.shape[:4]
            query, key, value = (x.flatten(2, 3) for x in (query, key, value))
        b, n_q, h, d = query.shape
        n_k = key.shape[1]
        assert d % 8 == 0 and query.stride(-1) == key.stride(-1) == value.stride(-1) == 1
        if isinstance(attn_bias, torch.Tensor):
            expected = (b, groups, per_group, n_q, n_k) if five_d else (b, h, n_q, n_k)
            assert attn_bias.shape == expected, f"bias {tuple(attn_bias.shape)}, expected {expected}"
            assert attn_bias.dtype == query.dtype
            assert attn_bias.stride(-1) == 1
            assert all(s % 8 == 0 for s in attn_bias.stride()[:-1]), f"bias strides {attn_bias.stride()}"
            bias = attn_bias.flatten(1, 2) if five_d else attn_bias
        elif attn_bias is not None:
            bias = attn_bias.materialize((n_q, n_k))
        else:
            bias = 0.0
        self.calls.append(dict(q=query, bias=attn_bias, p=p, scale=scale, five_d=five_d))
        scale = d ** -0.5 if scale is None else scale
        scores = torch.einsum("bqhd,bkhd->bhqk", query, key) * scale + bias
        out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), value)
        return out.unflatten(2, (groups, per_group)) if five_d else out


def xformers_backend():
    fake, backend = FakeXformers(), Xformers()
    backend._memory_efficient_attention, backend._attn_bias = fake.memory_efficient_attention, ATTN_BIAS
    return backend, fake


# -- fake SageAttention ----------------------------------------------------------------------------


def sage_math(q, k, v, causal, scale):
    if causal:
        assert q.shape[-2] == k.shape[-2], "causal only with as many queries as keys"
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


class FakeSage:
    """sageattn: 1.0.6 smooths K in place (k -= mean over the sequence); softmax is invariant to it."""

    def __init__(self, major):
        self.major, self.calls = major, []

    def sageattn(self, q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True, **kwargs):
        assert tensor_layout == "HND" and q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
        if self.major < 2:
            assert q.shape[-1] in (64, 96, 128)
            if smooth_k:
                k -= k.mean(dim=2, keepdim=True)
        self.calls.append(dict(causal=is_causal, scale=sm_scale))
        return sage_math(q, k, v, is_causal, sm_scale)

    def sageattn3_blackwell(self, q, k, v, attn_mask=None, is_causal=False, per_block_mean=True, **kwargs):
        assert attn_mask is None and q.shape[1] == k.shape[1] and q.shape[-1] in (64, 128)
        k -= k.mean(dim=-2, keepdim=True)  # what its preprocess_qkv does
        self.calls.append(dict(causal=is_causal))
        return sage_math(q, k, v, is_causal, None)


def sage_backend(major=2):
    fake, backend = FakeSage(major), Sage()
    backend._sageattn, backend.major = fake.sageattn, major
    return backend, fake


# -- registry, versions, devices, install ----------------------------------------------------------


def test_registered_in_order():
    assert [name for name in REGISTRY if name in ("flash", "xformers", "sage", "sage3")] == \
        ["flash", "xformers", "sage", "sage3"]
    assert not REGISTRY["sage"].exact and not REGISTRY["sage"].backward and REGISTRY["sage"].tolerance == 2e-2
    assert not REGISTRY["sage3"].exact and not REGISTRY["sage3"].backward
    assert REGISTRY["flash"].exact and REGISTRY["flash"].backward and REGISTRY["flash"].dropout
    assert REGISTRY["xformers"].dropout and REGISTRY["xformers"].backward


@pytest.mark.parametrize("version, refused", [("2.5.9", True), ("2.5.9.post1", True), ("2.6.0", False),
                                              ("2.6.3", False), ("2.8.3.post2", False), ("2.0.9", True)])
def test_flash_version(version, refused):
    assert (FlashAttn().version_problem(version) is not None) == refused


@pytest.mark.parametrize("version, refused", [("0.0.20", False), ("0.0.21", True), ("0.0.23.post1", True),
                                              ("0.0.26", True), ("0.0.26.post1", True), ("0.0.27", False),
                                              ("0.0.28.post3", False), ("0.0.35", False)])
def test_xformers_version(version, refused):
    assert base.version_tuple(version)[:3] >= (0, 0, 20)
    assert (Xformers().version_problem(version) is not None) == refused


@pytest.mark.parametrize("torch_version, expected", [
    ("2.11.0+cu130", "0.0.35"), ("2.10.0", "0.0.35"), ("2.10.0a0+git1234", "0.0.35"), ("3.0.0", "0.0.35"),
    ("2.9.1+cu128", "0.0.33.post1"), ("2.9.0", "0.0.33.post1"), ("2.8.0", "0.0.32.post2"),
    ("2.7.1+cu126", "0.0.31"), ("2.7.0", "0.0.30"), ("2.6.0", "0.0.29.post3"), ("2.5.1", "0.0.28.post3"),
    ("2.5.0", None), ("2.4.1", None), ("", None)])
def test_xformers_for_torch(torch_version, expected):
    assert xformers_for_torch(torch_version) == expected


def test_install_commands_keep_torch():
    for name in ("flash", "xformers", "sage", "sage3"):
        assert "--no-deps" in REGISTRY[name].install
    assert REGISTRY["flash"].install == "pip install flash-attn --no-build-isolation --no-deps"
    assert REGISTRY["xformers"].install.format(xformers=xformers_for_torch("2.7.1")) == \
        "pip install xformers==0.0.31 --no-deps"
    assert "git+https://github.com/thu-ml/SageAttention" in REGISTRY["sage"].install
    assert "subdirectory=sageattention3_blackwell" in REGISTRY["sage3"].install


@pytest.mark.parametrize("capability, flash, sage, sage3", [
    ((7, 5), False, False, False), ((8, 0), True, True, False), ((8, 6), True, True, False),
    ((8, 7), True, False, False), ((8, 9), True, True, False), ((9, 0), True, True, False),
    ((10, 0), True, False, False), ((12, 0), True, True, True), ((12, 1), True, True, True)])
def test_device_problem(monkeypatch, capability, flash, sage, sage3):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    device = torch.device("cuda", 0)
    assert (FlashAttn().device_problem(device) is None) == flash
    assert (Sage().device_problem(device) is None) == sage
    assert (Sage3().device_problem(device) is None) == sage3
    assert Xformers().device_problem(device) is None


# -- load() ----------------------------------------------------------------------------------------


def test_flash_load(monkeypatch):
    fake = FakeFlash()
    module = types.ModuleType("flash_attn")
    module.flash_attn_func, module.flash_attn_with_kvcache = fake.func, fake.with_kvcache
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    backend = FlashAttn()
    backend.load()
    assert backend._flash_attn_func == fake.func and backend._leftpad

    def kvcache_2_6_0(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, softmax_scale=None, causal=False):
        raise AssertionError

    module.flash_attn_with_kvcache = kvcache_2_6_0
    backend.load()
    assert not backend._leftpad
    assert backend.constraints(call(mask_info=("left", False, False))) == "left padding needs flash-attn 2.6.1"


def test_xformers_load_needs_cpp_library(monkeypatch):
    package = types.ModuleType("xformers")
    package._has_cpp_library = False
    monkeypatch.setitem(sys.modules, "xformers", package)
    with pytest.raises(ImportError, match="C\\+\\+"):
        Xformers().load()
    package._has_cpp_library = True
    ops = types.ModuleType("xformers.ops")
    ops.memory_efficient_attention = FakeXformers().memory_efficient_attention
    ops.fmha = SimpleNamespace(attn_bias=ATTN_BIAS)
    package.ops = ops
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    backend = Xformers()
    backend.load()
    assert backend._attn_bias is ATTN_BIAS


@pytest.mark.parametrize("version, major", [("1.0.6", 1), ("2.2.0", 2), ("2.2.0+cu128torch2.8", 2), (None, 1)])
def test_sage_load_reads_major_version(monkeypatch, version, major):
    module = types.ModuleType("sageattention")
    module.sageattn = FakeSage(major).sageattn
    monkeypatch.setitem(sys.modules, "sageattention", module)

    def fake_version(package):
        if version is None:
            raise sage_module.metadata.PackageNotFoundError(package)
        return version

    monkeypatch.setattr(sage_module.metadata, "version", fake_version)
    backend = Sage()
    backend.load()
    assert backend.major == major and backend._sageattn == module.sageattn


# -- constraints -----------------------------------------------------------------------------------

RIGHT_CAUSAL = ("right", True, False)

FLASH_TABLE = [
    ({}, None),
    ({"dtype": "bfloat16"}, None),
    ({"dtype": "float32"}, "dtype float32"),
    ({"head_dim": 80, "value_dim": 80}, None),
    ({"head_dim": 256, "value_dim": 256}, None),
    ({"head_dim": 288, "value_dim": 288}, "head dim 288"),
    ({"value_dim": 32}, "value dim differs"),
    ({"gqa": True, "custom_scale": True, "grad": True, "dropout": True}, None),
    ({"mask": "bool"}, "dense mask"),
    ({"mask": "additive"}, "dense mask"),
    ({"causal": True}, None),
    ({"causal": True, "equal_lengths": False}, "causal with unequal lengths"),
    ({"mask": "bool", "equal_lengths": False, "mask_info": ("right", False, False)}, None),
    ({"single_query": True, "equal_lengths": False, "mask_info": RIGHT_CAUSAL}, None),
    ({"equal_lengths": False, "mask_info": RIGHT_CAUSAL}, "right padding with causal chunk"),
    ({"single_query": True, "equal_lengths": False, "mask_info": ("right", True, True)}, "right padding with window"),
    ({"equal_lengths": False, "mask_info": ("left", True, True)}, None),
    ({"mask_info": (None, False, False)}, "mask_info without contiguous padding"),
    ({"mask_info": ("left", True, False), "grad": True}, "mask_info under autograd"),
    ({"mask_info": ("left", True, False), "dropout": True}, "dropout with mask_info"),
    ({"mask_info": ("left", True, False), "gqa": True, "custom_scale": True}, None),
]

XFORMERS_TABLE = [
    ({}, None),
    ({"dtype": "float32"}, None),
    ({"dtype": "float64"}, "dtype float64"),
    ({"head_dim": 512, "value_dim": 48}, None),
    ({"wide_grid": True}, "batch x heads above 65535"),
    ({"gqa": True}, None),
    ({"gqa": True, "grad": True}, "GQA under autograd"),
    ({"grad": True, "dropout": True, "mask": "bool", "causal": True, "equal_lengths": False}, None),
    ({"mask": "additive", "mask_info": (None, True, True), "grad": True, "dtype": "float32"}, None),
    ({"mask_info": ("right", True, True)}, None),
    ({"mask_info": ("right", False, True)}, "window without causal"),
    ({"mask_info": ("right", True, True), "grad": True}, None),
    ({"mask_info": ("right", True, True), "grad": True, "dtype": "float32"}, "local window under autograd"),
    ({"mask_info": ("right", True, True), "grad": True, "capability": (7, 5)}, "local window under autograd"),
]

SAGE_TABLE = [
    ({}, None),
    ({"dtype": "float32"}, "dtype float32"),
    ({"head_dim": 80, "value_dim": 80}, None),
    ({"head_dim": 160, "value_dim": 160}, "head dim 160"),
    ({"value_dim": 128}, "value dim differs"),
    ({"gqa": True, "custom_scale": True, "equal_lengths": False}, None),
    ({"causal": True}, None),
    ({"causal": True, "equal_lengths": False}, "causal with unequal lengths"),
    ({"mask": "bool"}, "dense mask"),
    ({"mask_info": ("left", True, False)}, "mask_info"),
]

SAGE1_TABLE = [
    ({"head_dim": 96, "value_dim": 96}, None),
    ({"head_dim": 80, "value_dim": 80}, "head dim 80"),
    ({"head_dim": 32, "value_dim": 32}, "head dim 32"),
]

SAGE3_TABLE = [
    ({}, None),
    ({"dtype": "bfloat16", "head_dim": 128, "value_dim": 128, "causal": True}, None),
    ({"dtype": "float32"}, "dtype float32"),
    ({"head_dim": 96, "value_dim": 96}, "head dim 96"),
    ({"head_dim": 256, "value_dim": 256}, "head dim 256"),
    ({"gqa": True}, "GQA"),
    ({"custom_scale": True}, "custom scale"),
    ({"mask": "additive"}, "dense mask"),
    ({"mask_info": ("right", True, False)}, "mask_info"),
    ({"causal": True, "equal_lengths": False}, "causal with unequal lengths"),
    ({"equal_lengths": False, "single_query": True}, None),
]


def sage1():
    backend = Sage()
    backend.major = 1
    return backend


@pytest.mark.parametrize("make, changes, expected",
                         [(FlashAttn, c, e) for c, e in FLASH_TABLE] + [(Xformers, c, e) for c, e in XFORMERS_TABLE]
                         + [(Sage, c, e) for c, e in SAGE_TABLE] + [(sage1, c, e) for c, e in SAGE1_TABLE]
                         + [(Sage3, c, e) for c, e in SAGE3_TABLE])
def test_constraints(make, changes, expected):
    assert make().constraints(call(**changes)) == expected


# -- flash run -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["plain", "unequal", "causal", "gqa", "scale", "gqa_causal_scale"])
def test_flash_matches_sdpa(case):
    backend, fake = flash_backend()
    q, k, v = qkv(hk=2 if "gqa" in case else None, n_k=7 if case == "unequal" else None)
    a = args(causal="causal" in case, scale=0.3 if "scale" in case else None, gqa="gqa" in case)
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    assert fake.calls[-1]["kind"] == "func" and fake.calls[-1]["causal"] == a.causal
    assert fake.calls[-1]["k"].shape[2] == k.shape[1]  # GQA passed natively, not expanded


@pytest.mark.parametrize("d, padded", [(80, 80), (84, 88), (20, 24), (256, 256)])
def test_flash_pads_head_dim_keeping_the_original_scale(d, padded):
    backend, fake = flash_backend()
    q, k, v = qkv(d=d)
    close(run_untouched(backend, q, k, v, args()), reference(q, k, v, args()))
    assert fake.calls[-1]["q"].shape[-1] == fake.calls[-1]["k"].shape[-1] == padded
    assert fake.calls[-1]["scale"] == pytest.approx(d ** -0.5)


def test_flash_forwards_dropout_and_refuses_a_bare_mask():
    backend, fake = flash_backend()
    q, k, v = qkv()
    backend.run(q, k, v, args(dropout_p=0.25))
    assert fake.calls[-1]["dropout_p"] == 0.25
    with pytest.raises(ValueError):
        backend.run(q, k, v, args(mask=torch.ones(5, 5, dtype=torch.bool)))
    arbitrary = MaskInfo(torch.ones(2, 5, dtype=torch.bool))  # padding None: keys anywhere
    with pytest.raises(ValueError):
        backend.run(q, k, v, args(mask=arbitrary.dense(5), mask_info=arbitrary))


@pytest.mark.parametrize("n_q", [1, 3])
@pytest.mark.parametrize("window", [None, 2, 4])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_left_padding(n_q, window, causal):
    backend, fake = flash_backend()
    q, k, v = qkv(b=3, hq=4, hk=2, n_q=n_q, n_k=8)
    info = MaskInfo.from_lengths([5, 8, 2], 8, padding="left", causal=causal, window=window)
    a = args(mask=info.dense(n_q), gqa=True, mask_info=info)
    assert backend.constraints(gpu_call(q, k, v, a)) is None
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    got = fake.calls[-1]
    assert got["kind"] == "kvcache" and got["causal"] == causal
    assert got["seqlens"].tolist() == [8, 8, 8] and got["leftpad"].tolist() == [3, 0, 6]
    assert got["window"] == ((-1, -1) if window is None else (window - 1, 0 if causal else -1))


@pytest.mark.parametrize("causal", [True, False])
def test_flash_right_padding_decode_step(causal):
    backend, fake = flash_backend()
    q, k, v = qkv(b=3, n_q=1, n_k=8)
    info = MaskInfo.from_lengths([5, 8, 3], 8, padding="right", causal=causal)
    a = args(mask=info.dense(1), scale=0.2, mask_info=info)
    assert backend.constraints(gpu_call(q, k, v, a)) is None
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    assert fake.calls[-1]["seqlens"].tolist() == [5, 8, 3] and fake.calls[-1]["leftpad"] is None
    assert fake.calls[-1]["scale"] == 0.2


def test_flash_right_padding_chunk_is_refused_because_flash_aligns_to_each_row():
    """With cache_seqlens the kernel puts the diagonal at each row's last real key; MaskInfo puts it
    at the last key of all. Exact for full rows, wrong for padded ones, so constraints refuse it."""
    backend, _ = flash_backend()
    q, k, v = qkv(b=2, n_q=3, n_k=8)
    full = MaskInfo.full(2, 8, causal=True)
    a = args(mask=full.dense(3), mask_info=full)
    close(backend.run(q, k, v, a), reference(q, k, v, a))
    padded = MaskInfo.from_lengths([6, 8], 8, padding="right", causal=True)
    a = args(mask=padded.dense(3), mask_info=padded)
    assert not torch.allclose(backend.run(q, k, v, a)[0], reference(q, k, v, a)[0])
    assert backend.constraints(gpu_call(q, k, v, a)) == "right padding with causal chunk"


def test_flash_empty_row_gives_zero_like_sdpa():
    backend, _ = flash_backend()
    q, k, v = qkv(b=2, n_q=1, n_k=6)
    info = MaskInfo.from_lengths([0, 4], 6, padding="right")
    a = args(mask=info.dense(1), mask_info=info)
    out = run_untouched(backend, q, k, v, a)
    close(out, reference(q, k, v, a))
    assert torch.equal(out[0], torch.zeros_like(out[0]))


def test_on_device_restores_the_current_device(monkeypatch):
    """SageAttention 2 calls torch.cuda.set_device(v.device) inside; the caller's device comes back."""
    state = {"current": 0, "seen": None}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: state.update(current=getattr(device, "index", device)))
    with on_device(SimpleNamespace(type="cuda", index=1)):
        state["seen"] = state["current"]
        torch.cuda.set_device(3)  # what the kernel does
    assert state == {"current": 0, "seen": 1}
    with on_device(torch.device("cpu")):
        pass
    assert state["current"] == 0


# -- xFormers run ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["plain", "causal_unequal", "gqa", "scale", "value_dim"])
def test_xformers_matches_sdpa(case):
    backend, fake = xformers_backend()
    q, k, v = qkv(hk=2 if case == "gqa" else None, n_q=3, n_k=5, dv=24 if case == "value_dim" else None)
    a = args(causal=case == "causal_unequal", scale=0.4 if case == "scale" else None, gqa=case == "gqa")
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    got = fake.calls[-1]
    assert got["five_d"] == (case == "gqa")
    assert isinstance(got["bias"], LowerTriangularMask) if a.causal else got["bias"] is None


@pytest.mark.parametrize("d, padded", [(20, 24), (64, 64)])
def test_xformers_pads_head_dim(d, padded):
    backend, fake = xformers_backend()
    q, k, v = qkv(d=d)
    close(run_untouched(backend, q, k, v, args()), reference(q, k, v, args()))
    assert fake.calls[-1]["q"].shape[-1] == padded and fake.calls[-1]["scale"] == pytest.approx(d ** -0.5)


@pytest.mark.parametrize("shape", [(2, 1, 3, 5), (1, 4, 3, 5), (3, 5), (2, 1, 1, 5)])
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("gqa", [False, True])
def test_xformers_dense_mask(shape, kind, gqa):
    backend, fake = xformers_backend()
    q, k, v = qkv(hk=2 if gqa else None, n_q=3, n_k=5)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(shape, generator=g) > 0.3
    mask[..., 0] = True  # no fully masked row
    if kind == "additive":
        mask = torch.zeros(shape).masked_fill(~mask, float("-inf")) + torch.rand(shape, generator=g)
    a = args(mask=mask, gqa=gqa)
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    bias = fake.calls[-1]["bias"]
    assert isinstance(bias, torch.Tensor) and bias.stride(-2) % 8 == 0


def test_xformers_mask_with_causal_is_folded_into_the_bias():
    backend, _ = xformers_backend()
    q, k, v = qkv(n_q=4, n_k=4)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2, 1] = False
    a = args(mask=mask, causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & torch.ones(4, 4, dtype=torch.bool).tril())
    close(run_untouched(backend, q, k, v, a), expected)


@pytest.mark.parametrize("padding", ["right", "left"])
def test_xformers_padding_goes_through_the_dense_mask(padding):
    backend, fake = xformers_backend()
    q, k, v = qkv(b=3, hq=4, hk=2, n_q=3, n_k=9)
    info = MaskInfo.from_lengths([7, 9, 8], 9, padding=padding, causal=True, window=3)  # no empty row
    a = args(mask=info.dense(3), gqa=True, mask_info=info)
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    assert isinstance(fake.calls[-1]["bias"], torch.Tensor)


@pytest.mark.parametrize("n_q, n_k", [(1, 7), (3, 7), (6, 6)])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_xformers_bottom_right_structure(n_q, n_k, window):
    """A causal MaskInfo without a dense mask: LowerTriangularFromBottomRightMask, local with a window;
    xFormers' own materialize() then gives exactly MaskInfo.dense."""
    backend, fake = xformers_backend()
    q, k, v = qkv(n_q=n_q, n_k=n_k)
    info = MaskInfo.full(2, n_k, causal=True, window=window)
    a = args(mask_info=info)
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a, mask=info.dense(n_q)))
    bias = fake.calls[-1]["bias"]
    if window is None:
        assert type(bias) is LowerTriangularFromBottomRightMask
    else:
        assert isinstance(bias, LowerTriangularFromBottomRightLocalAttentionMask) and bias._window_size == window


def test_xformers_forwards_dropout():
    backend, fake = xformers_backend()
    q, k, v = qkv()
    backend.run(q, k, v, args(dropout_p=0.1))
    assert fake.calls[-1]["p"] == 0.1


def test_xformers_refuses_a_mask_that_needs_grad():
    q, k, v = qkv()
    assert Xformers().eligible(q, k, v, args(mask=torch.zeros(5, 5, requires_grad=True))) == "mask requires grad"
    assert Xformers().eligible(q, k, v, args(mask=torch.zeros(5, 5))) is None


# -- SageAttention run -----------------------------------------------------------------------------


@pytest.mark.parametrize("major", [1, 2])
@pytest.mark.parametrize("case", ["plain", "causal", "gqa", "scale", "unequal"])
def test_sage_matches_sdpa_and_keeps_k(major, case):
    backend, fake = sage_backend(major)
    q, k, v = qkv(hk=2 if case == "gqa" else None, d=64, n_k=9 if case == "unequal" else None)
    k = k + 3.0  # a K mean that 1.x's in-place smoothing would remove from the caller's tensor
    a = args(causal=case == "causal", scale=0.1 if case == "scale" else None, gqa=case == "gqa")
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    assert fake.calls[-1] == {"causal": a.causal, "scale": a.scale}


def test_sage_1_would_mutate_k_without_the_guard():
    fake = FakeSage(1)
    q, k, v = qkv(d=64)
    k = k + 3.0
    before = k.clone()
    fake.sageattn(q, k, v)
    assert not torch.equal(k, before)  # the fake does what 1.0.6 does, so the guard above is real


def test_sage_takes_non_contiguous_last_dims():
    backend, _ = sage_backend(2)
    q, k, v = qkv(d=64)
    q_strided = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    close(run_untouched(backend, q_strided, k, v, args()), reference(q, k, v, args()))


@pytest.mark.parametrize("causal", [False, True])
def test_sage3_matches_sdpa_and_keeps_k(causal):
    fake, backend = FakeSage(3), Sage3()
    backend._sageattn3_blackwell = fake.sageattn3_blackwell
    q, k, v = qkv(d=128)
    k = k - 2.0
    a = args(causal=causal)
    close(run_untouched(backend, q, k, v, a), reference(q, k, v, a))
    with pytest.raises(ValueError):
        backend.run(q, k, v, args(scale=0.5))


"""torch's kernels as backends: exactness on the CPU, layout handling of the CUDA ones, constraints."""

import math
import types

import pytest
import torch
import torch.nn.functional as F

from mizuoto.runtime.accel.backends import REGISTRY, sdpa
from mizuoto.runtime.accel.call import Args, Call

NONE = Args(None, False, None, False, 0.0, None)


def qkv(b=2, h=4, lq=5, lk=7, d=16, hk=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    make = lambda heads, n: torch.randn(b, heads, n, d, generator=g).to(dtype)  # noqa: E731
    return make(h, lq), make(hk or h, lk), make(hk or h, lk)


def reference(q, k, v, args):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=args.mask, is_causal=args.causal, scale=args.scale,
                                          enable_gqa=args.enable_gqa)


def random_mask(shape, seed=1, full_row=False):
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.4
    mask[..., 0] = True
    if full_row:
        mask[0, ..., 0, :] = False  # a query that may attend to nothing: SDPA gives zeros
    return mask


CASES = {
    "plain": (dict(), lambda q: NONE),
    "bool mask": (dict(), lambda q: NONE._replace(mask=random_mask((2, 1, 5, 7)))),
    "bool mask per head": (dict(), lambda q: NONE._replace(mask=random_mask((2, 4, 5, 7)))),
    "2-D mask": (dict(), lambda q: NONE._replace(mask=random_mask((5, 7)))),
    "additive mask": (dict(), lambda q: NONE._replace(mask=torch.randn(1, 1, 5, 7))),
    "fully masked row": (dict(), lambda q: NONE._replace(mask=random_mask((2, 1, 5, 7), full_row=True))),
    "causal equal lengths": (dict(lk=5), lambda q: NONE._replace(causal=True)),
    "causal unequal lengths": (dict(lq=3, lk=7), lambda q: NONE._replace(causal=True)),
    "single query": (dict(lq=1, lk=9), lambda q: NONE),
    "gqa": (dict(h=8, hk=2), lambda q: NONE._replace(enable_gqa=True)),
    "gqa with mask": (dict(h=8, hk=2), lambda q: NONE._replace(enable_gqa=True, mask=random_mask((2, 1, 5, 7)))),
    "custom scale": (dict(), lambda q: NONE._replace(scale=0.31)),
    "odd head dim": (dict(d=20), lambda q: NONE),
}


@pytest.mark.parametrize("name", ["math", "cpu_flash"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_backends_match_the_reference(name, case):
    shape, make_args = CASES[case]
    q, k, v = qkv(**shape)
    args = make_args(q)
    inputs = [t.clone() for t in (q, k, v)]
    got = REGISTRY[name].run(q, k, v, args)
    want = reference(q, k, v, args)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)
    assert all(torch.equal(a, b) for a, b in zip(inputs, (q, k, v), strict=True))  # nothing mutated


@pytest.mark.parametrize("case", ["plain", "bool mask", "gqa", "causal equal lengths", "custom scale"])
def test_cpu_flash_is_what_sdpa_runs_on_the_cpu(case):
    # SDPA itself picks the CPU flash kernel for these calls, so the backend is bit-identical to it.
    shape, make_args = CASES[case]
    q, k, v = qkv(**shape)
    args = make_args(q)
    assert torch.equal(REGISTRY["cpu_flash"].run(q, k, v, args), reference(q, k, v, args))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_backends_in_half_precision(dtype):
    q, k, v = qkv(dtype=dtype)
    args = NONE._replace(mask=random_mask((2, 1, 5, 7)))
    want = reference(q.float(), k.float(), v.float(), args)
    for name in ("math", "cpu_flash"):
        got = REGISTRY[name].run(q, k, v, args)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want, rtol=0, atol=3e-2)


def test_math_supports_dropout_and_backward():
    q, k, v = (t.requires_grad_() for t in qkv())
    out = REGISTRY["math"].run(q, k, v, NONE._replace(dropout_p=0.5))
    out.sum().backward()
    assert q.grad is not None and k.grad is not None


def test_cpu_flash_rejects_what_it_cannot_take():
    q, k, v = qkv()
    flash = REGISTRY["cpu_flash"]
    assert flash.eligible(q, k, v, NONE._replace(mask=random_mask((4, 5, 7)))) == "3-D mask"
    assert flash.eligible(q, k, v, NONE._replace(mask=torch.zeros(1, 1, 5, 7, requires_grad=True))) \
        == "mask requires grad"
    assert flash.eligible(q, k, v, NONE._replace(mask=random_mask((2, 1, 5, 7)))) is None


# -- the CUDA kernels, called through a fake aten namespace on the CPU ------------------------------

class FakeAten:
    """Records what each CUDA kernel receives and computes it with the math kernel in float32."""

    def __init__(self):
        self.seen = {}

    def _math(self, q, k, v, bias, causal, scale):
        if causal and q.shape[-2] != k.shape[-2]:
            raise AssertionError("kernel given causal with unequal lengths")
        return torch.ops.aten._scaled_dot_product_attention_math(
            q.float(), k.float(), v.float(), None if bias is None else bias.float(), 0.0, causal, None,
            scale=scale, enable_gqa=q.shape[1] != k.shape[1])[0].to(q.dtype)

    def _scaled_dot_product_flash_attention(self, q, k, v, dropout_p, causal, debug, *, scale):
        self.seen["flash"] = dict(q=q, k=k, v=v, scale=scale)
        return (self._math(q, k, v, None, causal, scale),)

    def _scaled_dot_product_efficient_attention(self, q, k, v, bias, lse, dropout_p, causal, *, scale):
        self.seen["efficient"] = dict(q=q, k=k, v=v, bias=bias, scale=scale)
        return (self._math(q, k, v, bias, causal, scale),)

    def _scaled_dot_product_cudnn_attention(self, q, k, v, bias, lse, dropout_p, causal, debug, *, scale):
        self.seen["cudnn"] = dict(q=q, k=k, v=v, bias=bias, scale=scale)
        return (self._math(q, k, v, bias, causal, scale),)


@pytest.fixture
def aten(monkeypatch):
    fake = FakeAten()
    monkeypatch.setattr(sdpa, "_aten", lambda: fake)
    return fake


@pytest.mark.parametrize("name,kernel", [("sdpa_flash", "flash"), ("sdpa_efficient", "efficient"),
                                         ("sdpa_cudnn", "cudnn")])
def test_cuda_kernels_get_padded_head_dims_and_the_original_scale(aten, name, kernel):
    q, k, v = qkv(d=20)
    inputs = [t.clone() for t in (q, k, v)]
    out = REGISTRY[name].run(q, k, v, NONE)
    seen = aten.seen[kernel]
    assert seen["q"].shape[-1] == 24 and seen["k"].shape[-1] == 24 and seen["v"].shape[-1] == 24
    assert seen["scale"] == pytest.approx(1 / math.sqrt(20))
    assert out.shape == q.shape
    torch.testing.assert_close(out, reference(q, k, v, NONE), rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(inputs, (q, k, v), strict=True))


def test_flash_keeps_gqa_native_efficient_and_cudnn_expand(aten):
    q, k, v = qkv(h=8, hk=2)
    args = NONE._replace(enable_gqa=True)
    for name in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn"):
        out = REGISTRY[name].run(q, k, v, args)
        torch.testing.assert_close(out, reference(q, k, v, args), rtol=1e-5, atol=1e-6)
    assert aten.seen["flash"]["k"].shape[1] == 2
    assert aten.seen["efficient"]["k"].shape[1] == 8 and aten.seen["cudnn"]["v"].shape[1] == 8


@pytest.mark.parametrize("mask_shape", [(2, 1, 5, 7), (5, 7), (1, 4, 5, 7)])
def test_efficient_bias_is_additive_expanded_and_aligned(aten, mask_shape):
    q, k, v = qkv()
    args = NONE._replace(mask=random_mask(mask_shape, full_row=len(mask_shape) == 4))
    out = REGISTRY["sdpa_efficient"].run(q, k, v, args)
    bias = aten.seen["efficient"]["bias"]
    assert bias.dtype == q.dtype and bias.shape == (2, 4, 5, 7)
    assert bias.stride(-2) % 16 == 0  # rows start on 16-element boundaries
    torch.testing.assert_close(out, reference(q, k, v, args), rtol=1e-5, atol=1e-6)


def test_cudnn_bias_takes_the_query_dtype(aten):
    q, k, v = qkv(dtype=torch.float16)
    args = NONE._replace(mask=torch.zeros(1, 1, 5, 7))  # a float32 mask with half q is misread by cuDNN
    REGISTRY["sdpa_cudnn"].run(q, k, v, args)
    assert aten.seen["cudnn"]["bias"].dtype == torch.float16


def test_sdpa_params_falls_back_to_six_arguments(monkeypatch):
    class Old:
        def __init__(self, *args):
            if len(args) != 6:
                raise TypeError("incompatible constructor arguments")
            self.args = args

    monkeypatch.setattr(torch.backends.cuda, "SDPAParams", Old)
    q, k, v = qkv()
    assert len(sdpa.sdpa_params(q, k, v, None, 0.0, False, False).args) == 6


# -- constraints, on fabricated calls ---------------------------------------------------------------

H100 = Call(device="cuda", capability=(9, 0), dtype="float16", head_dim=128, value_dim=128, gqa=False,
            single_query=False, equal_lengths=True, long_queries=False, mask="none", mask_info=None,
            custom_scale=False, causal=False, dropout=False, grad=False, wide_grid=False)
V100 = H100._replace(capability=(7, 0))


@pytest.mark.parametrize("name,call,reason", [
    ("sdpa_flash", H100, None),
    ("sdpa_flash", H100._replace(dtype="float32"), "dtype float32"),
    ("sdpa_flash", H100._replace(mask="bool"), "dense mask"),
    ("sdpa_flash", H100._replace(causal=True, equal_lengths=False), "causal with unequal lengths"),
    ("sdpa_flash", H100._replace(causal=True), None),
    ("sdpa_flash", H100._replace(head_dim=288, value_dim=288), "head dim 288"),
    ("sdpa_flash", V100, "compute capability 7.0"),
    ("sdpa_efficient", H100._replace(dtype="float32", mask="additive"), None),
    ("sdpa_efficient", H100._replace(wide_grid=True), "batch x heads above 65535"),
    ("sdpa_efficient", H100._replace(dtype="float64"), "dtype float64"),
    ("sdpa_efficient", V100, None),
    ("sdpa_cudnn", H100._replace(mask="bool"), None),
    ("sdpa_cudnn", H100._replace(head_dim=256, value_dim=256), "head dim 256"),
    ("sdpa_cudnn", H100._replace(mask="bool", grad=True), "mask under autograd"),
    ("sdpa_cudnn", H100._replace(dtype="float32"), "dtype float32"),
    ("cpu_flash", H100._replace(device="cpu", capability=None, dropout=True), "dropout"),
    ("cpu_flash", H100._replace(device="cpu", capability=None, dtype="float32", gqa=True), None),
    ("cpu_flash", H100._replace(device="cpu", capability=None, mask="bool", causal=True),
     "mask with causal"),
    ("math", H100._replace(dropout=True, grad=True, dtype="float64"), None),
])
def test_constraints(name, call, reason):
    assert REGISTRY[name].constraints(call) == reason


def test_declared_abilities():
    assert REGISTRY["math"].devices == ("cpu", "cuda", "mps", "xpu") and REGISTRY["math"].dropout
    assert REGISTRY["cpu_flash"].devices == ("cpu",) and not REGISTRY["cpu_flash"].dropout
    assert all(REGISTRY[n].exact and REGISTRY[n].backward for n in ("math", "cpu_flash", "sdpa_flash"))


def test_device_capability_check(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert REGISTRY["sdpa_flash"].device_problem(types.SimpleNamespace()) == "needs compute capability 8.0+, has 7.5"
    assert REGISTRY["sdpa_efficient"].device_problem(types.SimpleNamespace()) is None


def test_torch_eligibility_is_asked_about_what_the_kernel_will_see(monkeypatch):
    seen = []

    def can_use(params):
        seen.append(params)
        return False

    monkeypatch.setattr(sdpa, "sdpa_params", lambda q, k, v, *rest: (q.shape, k.shape, rest))
    q, k, v = qkv(h=8, hk=2, lq=1, lk=9)
    reason = sdpa.torch_check(can_use, q, k, v, NONE._replace(enable_gqa=True), "efficient")
    assert reason == "torch's efficient check refused it"
    (q_shape, k_shape, rest) = seen[0]
    assert q_shape == (2, 2, 1, 16) and k_shape == (2, 2, 9, 16) and rest[-1] is False

import pytest
import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError
from mizuoto.runtime import accel
from mizuoto.runtime.context import RequestContext

SITE = accel.Site("tests.unit.entry")


def qkv(b=2, h=3, lq=5, lk=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, lq, d, generator=g), torch.randn(b, h, lk, d, generator=g),
            torch.randn(b, h, lk, d, generator=g))


def test_auto_is_exactly_the_reference():
    q, k, v = qkv()
    mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[..., 0] = True
    got = accel.attention(q, k, v, site=SITE, mask=mask)
    assert torch.equal(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    q, k, v = qkv(lq=7)
    got = accel.attention(q, k, v, site=SITE, causal=True, scale=0.3)
    assert torch.equal(got, F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3))


def test_gqa_reference():
    q, _, _ = qkv(h=4)
    _, k, v = qkv(h=2)
    got = accel.attention(q, k, v, site=SITE, enable_gqa=True)
    assert torch.equal(got, F.scaled_dot_product_attention(q, k, v, enable_gqa=True))


def test_custom_reference_and_registry():
    calls = []

    def handwritten(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
        calls.append((mask, causal, scale))
        return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, -1) @ v

    site = accel.Site("tests.unit.handwritten", reference=handwritten, approx_ok=False)
    q, k, v = qkv()
    accel.attention(q, k, v, site=site)
    assert calls == [(None, False, None)]
    assert accel.REGISTRY["tests.unit.handwritten"] is site and not site.approx_ok


def test_site_names_are_unique_across_modules():
    ns = {"__name__": "some.other.module"}
    with pytest.raises(ValueError, match="declared both"):
        exec("from mizuoto.runtime import accel\naccel.Site('tests.unit.entry')", ns)


def test_policy_for_shares_objects_and_rejects_unknown_names():
    assert accel.policy_for("auto") is accel.policy_for("auto")
    assert accel.policy_for("auto").start() is None
    with pytest.raises(InputError, match="unknown attention policy 'turbo'; choose one of: auto"):
        accel.policy_for("turbo")


def test_a_bound_policy_receives_the_call():
    class Recording:
        def attend(self, site, *args):
            self.site = site
            return "bound"

    policy = Recording()
    q, k, v = qkv()
    with RequestContext(0, accel=policy).step():
        assert accel.attention(q, k, v, site=SITE) == "bound"
    assert policy.site is SITE

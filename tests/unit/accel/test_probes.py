"""Probes: version rules, imports, devices and the self-test, cached per process and device."""

import pytest
import torch
import torch.nn.functional as F

from mizuoto.runtime.accel import probes
from mizuoto.runtime.accel.backends import Backend
from mizuoto.runtime.accel.backends.base import version_tuple


class Probed(Backend):
    devices = ("cpu",)

    def __init__(self, name="probed", package=None, run=None, problem=None, load_error=None, tolerance=2e-3):
        self.name, self.package, self._run, self.problem, self.load_error = name, package, run, problem, load_error
        self.tolerance = tolerance
        self.loads = 0

    def version_problem(self, version):
        return self.problem

    def load(self):
        self.loads += 1
        if self.load_error:
            raise self.load_error

    def run(self, q, k, v, args):
        return (self._run or (lambda q, k, v: F.scaled_dot_product_attention(q, k, v)))(q, k, v)


@pytest.fixture(autouse=True)
def fresh():
    probes.forget()
    yield
    probes.forget()


def test_good_backend_passes_with_its_error(monkeypatch):
    backend = Probed()
    found = probes.probe(backend, "cpu")
    assert found.ok and found.reason is None and 0 <= found.error < 1e-5
    assert probes.probe(backend, torch.device("cpu")) is found and backend.loads == 1  # cached


def test_wrong_device_type():
    found = probes.probe(Probed(), "meta")
    assert not found.ok and found.reason == "runs on cpu only"


def test_package_missing_or_bad_version(monkeypatch):
    assert probes.probe(Probed("a", package="surely-not-installed-pkg"), "cpu").reason \
        == "surely-not-installed-pkg is not installed"
    monkeypatch.setattr(probes, "package_version", lambda package: "0.0.23")
    found = probes.probe(Probed("b", package="xformers", problem="0.0.23 breaks large batches"), "cpu")
    assert not found.ok and found.reason == "0.0.23 breaks large batches" and found.version == "0.0.23"


def test_import_failure():
    found = probes.probe(Probed(load_error=ImportError("libc10_cuda.so: cannot open\nshared object")), "cpu")
    assert not found.ok and found.reason == "cannot import: libc10_cuda.so: cannot open shared object"


@pytest.mark.parametrize("run,reason", [
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v) + 0.1, "self-test error 1.00e-01 above 2e-03"),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * float("nan"), "self-test error nan above 2e-03"),
    (lambda q, k, v: q[..., :1], "self-test raised RuntimeError: output shape"),
])
def test_self_test_catches_wrong_kernels(run, reason):
    found = probes.probe(Probed(run=run), "cpu")
    assert not found.ok and found.reason.startswith(reason)


def test_approximate_tolerance():
    noisy = lambda q, k, v: F.scaled_dot_product_attention(q, k, v) + 0.01  # noqa: E731
    assert not probes.probe(Probed("exactish", run=noisy), "cpu").ok
    assert probes.probe(Probed("rough", run=noisy, tolerance=2e-2), "cpu").ok


def test_real_cpu_backends_pass():
    for name in ("math", "cpu_flash"):
        assert probes.probe(name, "cpu").ok


def test_version_tuple():
    assert version_tuple("2.8.3.post2") == (2, 8, 3)
    assert version_tuple("0.0.28.post3") == (0, 0, 28)
    assert version_tuple("2.13.0+cpu") == (2, 13, 0)
    assert version_tuple("1.0.6") == (1, 0, 6)

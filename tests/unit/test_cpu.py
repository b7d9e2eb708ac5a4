import os
import subprocess
import sys

import pytest
import torch

from mizuoto.core.compute import cpu

# A computation whose floats depend on how reductions are split across threads.
WORK = """
import hashlib, torch
g = torch.Generator().manual_seed(0)
a = torch.randn(300, 700, generator=g); b = torch.randn(700, 500, generator=g)
x = torch.randn(4_000_000, generator=g)
out = torch.cat([(a @ b).flatten(), a.sum(1), torch.softmax(a, 1).flatten(), x.sum()[None]])
print(torch.get_num_threads(), hashlib.sha256(out.numpy().tobytes()).hexdigest())
"""


def run(code, env):
    return subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MALLOC_ARENA_MAX", "OMP_PROC_BIND", "OMP_PLACES")}
    env.update(extra)
    return env


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(cpu, "_applied", None)
    return cpu


def test_this_machine_is_glibc_linux():
    assert cpu.supported()


def test_apply_changes_neither_thread_count_nor_results():
    applied = "from mizuoto.core.compute import cpu; print(cpu.apply())\n"
    plain = run(WORK, clean_env())
    out = run(applied + WORK, clean_env()).splitlines()
    assert out[0] == "{'MALLOC_ARENA_MAX': '4'}"
    assert out[1] == plain


def test_apply_sets_the_allocator_and_exports_it(fresh):
    env = {}
    assert fresh.apply(env) == {"MALLOC_ARENA_MAX": "4"}
    assert env == {"MALLOC_ARENA_MAX": "4"}
    assert fresh.apply({}) == {"MALLOC_ARENA_MAX": "4"}  # once per process


@pytest.mark.parametrize("user", [{"MALLOC_ARENA_MAX": "1"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
                                  {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}])
def test_user_allocator_choice_wins(fresh, user):
    env = dict(user)
    assert fresh.apply(env) == {}
    assert env == user


def test_no_effect_off_glibc_linux(fresh, monkeypatch):
    monkeypatch.setattr(cpu.sys, "platform", "darwin")
    env = {}
    assert fresh.apply(env) == {} and env == {}
    assert cpu.child_env({"A": "1"}, compute_only=True) == {"A": "1"}


def test_child_env_passes_this_process_thread_count():
    env = cpu.child_env(clean_env())
    assert env["OMP_NUM_THREADS"] == str(torch.get_num_threads())
    assert env["MALLOC_ARENA_MAX"] == str(cpu.ARENA_MAX)
    assert "OMP_PROC_BIND" not in env


def test_child_env_keeps_user_choices():
    env = cpu.child_env(clean_env(OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2", OMP_PLACES="threads"),
                        compute_only=True)
    assert (env["OMP_NUM_THREADS"], env["MALLOC_ARENA_MAX"], env["OMP_PLACES"]) == ("1", "2", "threads")
    assert "OMP_PROC_BIND" not in env


def test_compute_only_children_are_bound_per_core():
    env = cpu.child_env(clean_env(), compute_only=True)
    assert (env["OMP_PROC_BIND"], env["OMP_PLACES"]) == ("close", "cores")


def test_child_computes_what_the_parent_computes():
    # A parent running one thread (not torch's default here) hands its count on; the child's floats
    # then equal the parent's, while a child left to torch's default computes different ones.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        env = cpu.child_env(clean_env(), compute_only=True)
    finally:
        torch.set_num_threads(previous)
    parent = run("import torch; torch.set_num_threads(1)\n" + WORK, clean_env())
    assert run(WORK, env) == parent
    default = run(WORK, clean_env())
    if default.split()[0] != "1":
        assert default.split()[1] != parent.split()[1], "the work does not depend on the thread count"

"""AccelPolicy objects, one per policy name, shared by every model loaded with that name."""

from __future__ import annotations

from dataclasses import dataclass

from mizuoto.core.errors import InputError
from mizuoto.core.settings import POLICY_NAMES


@dataclass(frozen=True)
class AccelPolicy:
    name: str
    strict: bool = False

    @property
    def binding(self):
        """What a request binds around each step: None for auto, which binds nothing."""
        return None if self.name == "auto" else self


_POLICIES: dict[tuple[str, bool], AccelPolicy] = {}


def policy_for(name: str, strict: bool = False) -> AccelPolicy:
    """The shared policy object for `name`; an unknown name is a one-line error listing the known."""
    if name not in POLICY_NAMES:
        raise InputError(f"unknown attention policy '{name}'; choose one of: {', '.join(POLICY_NAMES)}")
    key = (name, bool(strict))
    policy = _POLICIES.get(key)
    if policy is None:
        policy = _POLICIES[key] = AccelPolicy(name, bool(strict))
    return policy

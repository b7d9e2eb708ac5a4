"""Run: what one request did, for its report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Run:
    seed: int
    policy: str
    started: float = field(default_factory=time.perf_counter)
    wall_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def finish(self) -> None:
        self.wall_seconds = time.perf_counter() - self.started

    def attention_report(self) -> dict[str, Any]:
        # With `auto` nothing is bound and nothing is counted: every site ran its reference.
        return {"policy": self.policy}

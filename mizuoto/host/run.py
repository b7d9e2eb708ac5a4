"""Run: what one request did, for its report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Run:
    seed: int
    policy: str
    accel: Any = None  # the request's AccelRun; None under auto
    started: float = field(default_factory=time.perf_counter)
    wall_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def finish(self) -> None:
        self.wall_seconds = time.perf_counter() - self.started
        if self.accel is not None:
            self.warnings.extend(self.accel.warnings())

    def attention_report(self) -> dict[str, Any]:
        if self.accel is None:
            # auto binds nothing and counts nothing: every site ran its own reference.
            return {"policy": self.policy}
        return self.accel.report()

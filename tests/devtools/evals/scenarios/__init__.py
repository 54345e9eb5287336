"""The scenario list. One module per invariant; ``SCENARIOS`` is their union, in order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tests.devtools.evals.harness import Harness

INVARIANTS = ("durability", "consent", "boundedness", "integrity", "accountability", "resilience")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    invariant: str
    claim: str
    fn: Callable[[Harness], None]

    def __str__(self) -> str:
        return self.name


SCENARIOS: list[Scenario] = []


def scenario(
    invariant: str, claim: str
) -> Callable[[Callable[[Harness], None]], Callable[[Harness], None]]:
    """Register ``fn`` as a scenario named after it (underscores become dashes)."""
    if invariant not in INVARIANTS:
        raise ValueError(f"unknown invariant {invariant!r}")

    def register(fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
        name = fn.__name__.replace("_", "-")
        if any(s.name == name for s in SCENARIOS):
            raise ValueError(f"duplicate scenario {name}")
        SCENARIOS.append(Scenario(name, invariant, claim, fn))
        return fn

    return register


def by_invariant(invariant: str | None) -> list[Scenario]:
    return [s for s in SCENARIOS if invariant in (None, s.invariant)]


from tests.devtools.evals.scenarios import (  # noqa: E402,F401  (registers them)
    accountability,
    boundedness,
    consent,
    durability,
    integrity,
    resilience,
)

# Run in the order the invariants are listed; within one, in the order they are written.
SCENARIOS.sort(key=lambda s: INVARIANTS.index(s.invariant))

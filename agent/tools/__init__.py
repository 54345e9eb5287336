"""The fifteen tools, frozen at import. See ``registry.py`` for why."""

from __future__ import annotations

from typing import Any

from agent.tools import irreversible, reads, reversible
from agent.tools.registry import Risk, ToolDef, ToolError, args_hash, build_registry

REGISTRY = build_registry([*reads.TOOLS, *reversible.TOOLS, *irreversible.TOOLS])


def get_tool(name: str) -> ToolDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ToolError(f"no such tool: {name!r}. Available tools: {', '.join(REGISTRY)}") from None


def risk_of(name: str) -> Risk | None:
    tool = REGISTRY.get(name)
    return tool.risk if tool else None


def api_schemas() -> list[dict[str, Any]]:
    """Tool schemas for the Messages API, sorted by name so the prompt cache stays warm."""
    return [REGISTRY[name].api_schema() for name in sorted(REGISTRY)]


__all__ = [
    "REGISTRY",
    "Risk",
    "ToolDef",
    "ToolError",
    "api_schemas",
    "args_hash",
    "get_tool",
    "risk_of",
]

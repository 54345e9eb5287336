"""Placeholder; implemented by the tools work."""

from agent.tools.registry import ToolDef

TOOLS: list[ToolDef] = []

"""The tool registry: twelve tools, frozen at import.

Risk class is read from here and nowhere else: not from model output, not
from arguments, not from results. ``ToolDef`` is a frozen dataclass and the
registry a read-only mapping, so nothing at run time can re-classify a tool.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jsonschema


class Risk(enum.StrEnum):
    READ = "read"
    REVERSIBLE = "reversible"
    IRREVERSIBLE = "irreversible"


class ToolError(Exception):
    """A failure the model should see as an error tool result (never a crash)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolContext:
    """What a handler may know: the run's tenant, ticket and customer. No conversation text."""

    merchant_id: int
    ticket_id: int
    customer_id: int
    run_id: str
    root_run_id: str
    tool_call_id: str
    max_refund_cents: int
    # Set for irreversible calls: the ledger entry the effect must link to.
    ledger_entry_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ToolOutcome:
    text: str
    inverse: dict[str, Any] | None = None


Handler = Callable[[ToolContext, dict[str, Any]], ToolOutcome]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolDef:
    name: str
    description: str
    risk: Risk
    input_schema: Mapping[str, Any]
    handler: Handler
    preview: Callable[[dict[str, Any]], str] | None = None
    # Bounds that strict-mode schemas cannot express (minimum, maxItems, lengths).
    check: Callable[[dict[str, Any]], None] | None = None

    def api_schema(self) -> dict[str, Any]:
        """The tool as the Anthropic Messages API takes it, strict mode on."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": json.loads(json.dumps(self.input_schema)),
            "strict": True,
        }

    def validate(self, args: Any) -> dict[str, Any]:
        """Return the arguments if they are valid; raise ToolError with a readable reason."""
        if not isinstance(args, dict):
            raise ToolError(f"invalid arguments for {self.name}: expected an object")
        try:
            jsonschema.validate(args, dict(self.input_schema))
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
            raise ToolError(f"invalid arguments for {self.name}: {where}: {exc.message}") from None
        if self.check is not None:
            self.check(args)
        return args


# Keywords the Messages API rejects in strict mode; enforced in code instead.
FORBIDDEN_SCHEMA_KEYWORDS = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "maxItems",
        "minItems",
        "minLength",
        "maxLength",
        "pattern",
    }
)


def _walk_keys(schema: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(schema, dict):
        for k, v in schema.items():
            keys.add(k)
            if k == "properties" and isinstance(v, dict):
                for sub in v.values():
                    keys |= _walk_keys(sub)
            elif isinstance(v, dict | list):
                keys |= _walk_keys(v)
    elif isinstance(schema, list):
        for item in schema:
            keys |= _walk_keys(item)
    return keys


def _checked(tool: ToolDef) -> ToolDef:
    schema = tool.input_schema
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise ValueError(f"{tool.name}: schema must be a closed object")
    if sorted(schema.get("required", [])) != sorted(schema.get("properties", {})):
        raise ValueError(f"{tool.name}: every property must be required (strict mode)")
    bad = _walk_keys(dict(schema)) & FORBIDDEN_SCHEMA_KEYWORDS
    if bad:
        raise ValueError(f"{tool.name}: strict mode rejects {sorted(bad)}; check them in code")
    if tool.risk is Risk.IRREVERSIBLE and tool.preview is None:
        raise ValueError(
            f"{tool.name}: an irreversible tool must render a preview for the approver"
        )
    return tool


def build_registry(tools: list[ToolDef]) -> Mapping[str, ToolDef]:
    names = [t.name for t in tools]
    if len(names) != len(set(names)):
        raise ValueError("duplicate tool names")
    return MappingProxyType({t.name: _checked(t) for t in sorted(tools, key=lambda t: t.name)})


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_hash(tool: str, args: Any) -> str:
    """sha256 of the canonical ``{tool, args}``: what an approval is bound to."""
    return hashlib.sha256(canonical_json({"tool": tool, "args": args}).encode()).hexdigest()

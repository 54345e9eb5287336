"""The tool registry: fifteen tools, frozen at import.

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

from agent.tools.masking import mask_result


class Risk(enum.StrEnum):
    READ = "read"
    REVERSIBLE = "reversible"
    IRREVERSIBLE = "irreversible"


class ToolError(Exception):
    """A failure the model should see as an error tool result (never a crash)."""


class Narrowing(enum.StrEnum):
    """How a person may change one argument of an irreversible call when approving it.

    Declared per tool and field in the registry (``ToolDef.narrowable``), never in a view:
    every field not declared must be approved exactly as proposed.
    """

    # A whole number at least 1 and no larger than proposed (a smaller refund).
    AT_MOST = "at_most"
    # Other words that pass the tool's own checks (an edited email body).
    REWORD = "reword"


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
    # Where this run reads orders: the merchant's source when the run started (Run.order_source).
    order_source: str = "local"


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
    # What the approver reads, from the arguments and the order's currency alone.
    preview: Callable[[dict[str, Any], str], str] | None = None
    # Bounds that strict-mode schemas cannot express (minimum, maxItems, lengths).
    check: Callable[[dict[str, Any]], None] | None = None
    # Irreversible tools: the argument fields that say *which* effect a call is (which order,
    # which amount, which ticket and so which recipient). The ledger matches a call against
    # every effect of its lineage by these (``agent.ledger.lineage``), never by the model's call id.
    identity: tuple[str, ...] = ()
    # Irreversible tools: the fields that must *also* be identical for an effect already made
    # to answer a call (an email's body: the same words to the same person). Two calls with
    # one identity and different content are two effects, so a person is asked, with the
    # earlier one on the card. Every field in neither tuple is wording (a refund's reason, an
    # email's subject) and never makes a call a new effect: a real model rewords every call.
    # (Content may also be listed as ``wording`` below: the ledger matches an email's body
    # exactly, while divergence reports a reworded body as a soft difference.)
    content: tuple[str, ...] = ()
    # Irreversible tools: the fields a person may change when approving, and how (a smaller
    # refund, an edited body). Everything else — the order, the recipient, the tool — is
    # approved exactly as proposed or not at all (``agent.tools.narrowing``).
    narrowable: tuple[tuple[str, Narrowing], ...] = ()
    # The argument fields that are wording (a reason, a note's or an email's body, a search's
    # words) rather than a decision. ``replay --diverge`` compares every other field — amounts,
    # order and customer references, recipients, statuses — and reports a difference only in
    # these as a soft one (``agent.replay.decisions``). An irreversible tool's wording is exactly the
    # fields outside its identity (checked at import), so "same decision" never counts a
    # field the ledger treats as identity.
    wording: tuple[str, ...] = ()
    # No merchant approval rule may ever approve this tool: a person decides every call.
    person_only: bool = False
    # The argument a merchant rule's "up to N cents" limit reads (``agent.consent.policy``).
    money_field: str = ""
    # Irreversible tools whose effect may live in another system: which kind ("payments",
    # "mail"). The merchant's adapter setting picks where it happens (``agent.effects``);
    # empty: always in this database.
    external: str = ""
    # Result fields shown to the model in full: the tool's purpose needs the email addresses
    # or phone numbers in them (a staff member to assign to, the merchant's own published
    # text). Everything else in a result is masked (``agent.tools.masking``).
    unmasked: tuple[str, ...] = ()

    def narrowing(self) -> dict[str, Narrowing]:
        """The narrowable fields as a mapping (the frozen field is a tuple of pairs)."""
        return dict(self.narrowable)

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
        """Call the handler; what the model (and so the step log) gets back is masked.

        A refusal (``ToolError``) passes as it is: it quotes what the model sent, never a
        record it read.
        """
        outcome = self.handler(ctx, args)
        return dataclasses.replace(outcome, text=mask_result(outcome.text, self.unmasked))

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
        exc = jsonschema.exceptions.best_match(_validator(self.input_schema).iter_errors(args))
        if exc is not None:
            where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
            raise ToolError(f"invalid arguments for {self.name}: {where}: {exc.message}")
        if self.check is not None:
            self.check(args)
        return args


# Each schema's validator, checked and built once (as ``jsonschema.validate`` does on every
# call: a tenth of a step's CPU). Keyed by the schema object's id, holding the schema so that
# id is never reused while the entry lives.
_validators: dict[int, tuple[Mapping[str, Any], Any]] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    found = _validators.get(id(schema))
    if found is None or found[0] is not schema:
        plain = dict(schema)
        cls = jsonschema.validators.validator_for(plain)
        cls.check_schema(plain)
        found = _validators[id(schema)] = (schema, cls(plain))
    return found[1]


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
    if tool.risk is Risk.IRREVERSIBLE and not tool.identity:
        raise ValueError(f"{tool.name}: an irreversible tool must declare its identity fields")
    fields = set(schema.get("properties", {}))
    unknown = (set(tool.identity) | set(tool.content)) - fields
    if unknown:
        raise ValueError(
            f"{tool.name}: identity or content names fields it does not take: {sorted(unknown)}"
        )
    if set(tool.identity) & set(tool.content):
        raise ValueError(f"{tool.name}: a field is either identity or content, not both")
    if tool.content and tool.risk is not Risk.IRREVERSIBLE:
        raise ValueError(f"{tool.name}: only an irreversible tool's effects are matched")
    unknown = set(tool.wording) - fields
    if unknown:
        raise ValueError(f"{tool.name}: wording names fields it does not take: {sorted(unknown)}")
    if tool.risk is Risk.IRREVERSIBLE and set(tool.wording) != fields - set(tool.identity):
        raise ValueError(
            f"{tool.name}: an irreversible tool's wording must be exactly its non-identity fields"
        )
    if tool.narrowable and tool.risk is not Risk.IRREVERSIBLE:
        raise ValueError(f"{tool.name}: only an irreversible tool is approved, so narrowed")
    unknown = {name for name, _ in tool.narrowable} - fields
    if unknown:
        raise ValueError(
            f"{tool.name}: narrowable names fields it does not take: {sorted(unknown)}"
        )
    if tool.money_field and tool.money_field not in fields:
        raise ValueError(f"{tool.name}: money_field {tool.money_field!r} is not one of its fields")
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


def effect_hash(tool: ToolDef, args: Any) -> str:
    """sha256 of the canonical ``{tool, identity and content fields}``: the same effect, whatever its wording.

    Two calls with one effect hash do the same thing (the same refund, the same words to the
    same customer), so an effect already made answers the second (``agent.ledger.lineage``).
    """
    fields = args if isinstance(args, dict) else {}
    picked = {name: fields.get(name) for name in (*tool.identity, *tool.content)}
    return hashlib.sha256(
        canonical_json({"tool": tool.name, "effect": picked}).encode()
    ).hexdigest()


def identity_hash(tool: ToolDef, args: Any) -> str:
    """sha256 of the canonical ``{tool, identity fields}``: which effect a call is, not its words."""
    fields = args if isinstance(args, dict) else {}
    picked = {name: fields.get(name) for name in tool.identity}
    return hashlib.sha256(
        canonical_json({"tool": tool.name, "identity": picked}).encode()
    ).hexdigest()

"""What Shopify's GraphQL layer does before a resolver runs, for the double
(``shopify_double.py``): the schema, validation with Shopify's error codes, and the
calculated query cost.

The cost rules, from shopify.dev's "GraphQL Admin API rate limits": a scalar or enum field
costs 0; an object field 1; a connection 2 + ``first`` * (one node: 1 + its selection), and a
connection asked without ``first`` or ``last`` is refused; a list of objects with ``first``
``first`` * one item; a mutation field 10 plus what its payload selects. A query whose
requested cost is over ``MAX_QUERY_COST`` (1000) is refused.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from graphql import (
    GraphQLObjectType,
    GraphQLSchema,
    build_schema,
    get_named_type,
    get_nullable_type,
    is_leaf_type,
    is_list_type,
    specified_rules,
    validate,
)
from graphql.language import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
)

SCHEMA_SDL = (Path(__file__).with_name("shopify_admin.graphql")).read_text()
MAX_QUERY_COST = 1000
MUTATION_COST = 10

# graphql-core's validation rule -> the code Shopify puts in ``extensions.code``.
RULE_CODES = {
    "FieldsOnCorrectTypeRule": "undefinedField",
    "KnownArgumentNamesRule": "argumentNotAccepted",
    "ValuesOfCorrectTypeRule": "argumentLiteralsIncompatible",
    "VariablesInAllowedPositionRule": "variableMismatch",
    "ProvidedRequiredArgumentsRule": "missingRequiredArguments",
    "KnownDirectivesRule": "undefinedDirective",
    "ScalarLeafsRule": "selectionMismatch",
    "NoUndefinedVariablesRule": "variableNotDefined",
    "NoUnusedVariablesRule": "variableNotUsed",
}


@functools.cache
def admin_schema() -> GraphQLSchema:
    """The schema, built once per process (graphql-core takes a good part of a second)."""
    return build_schema(SCHEMA_SDL)


def validation_errors(schema: GraphQLSchema, document: DocumentNode) -> list[dict[str, Any]]:
    """Every error graphql-core's rules find, each with the code Shopify gives it."""
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for rule in specified_rules:
        for error in validate(schema, document, [rule]):
            if error.message in seen:
                continue
            seen.add(error.message)
            errors.append(
                {
                    **error.formatted,
                    "extensions": {"code": RULE_CODES.get(rule.__name__, rule.__name__)},
                }
            )
    return errors


def query_cost(
    schema: GraphQLSchema,
    document: DocumentNode,
    operation: OperationDefinitionNode,
    variables: dict[str, Any],
) -> int:
    """The requested cost of ``operation``, by the rules in this module's docstring."""
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    mutation = operation.operation.value == "mutation"
    root_type = schema.mutation_type if mutation else schema.query_type
    assert root_type is not None
    return _selection_cost(
        operation.selection_set, root_type, fragments, variables, top_mutation=mutation
    )


class CostRefused(Exception):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def operation_of(document: DocumentNode, name: str | None) -> OperationDefinitionNode:
    ops = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    return next((o for o in ops if o.name and o.name.value == name), ops[0])


def _fields(
    selection_set: SelectionSetNode | None, fragments: dict[str, FragmentDefinitionNode]
) -> list[FieldNode]:
    out: list[FieldNode] = []
    for sel in selection_set.selections if selection_set else ():
        if isinstance(sel, FieldNode):
            out.append(sel)
        elif isinstance(sel, InlineFragmentNode):
            out.extend(_fields(sel.selection_set, fragments))
        elif isinstance(sel, FragmentSpreadNode):
            out.extend(_fields(fragments[sel.name.value].selection_set, fragments))
    return out


def _first(node: FieldNode, variables: dict[str, Any]) -> int | None:
    for arg in node.arguments or ():
        if arg.name.value in ("first", "last"):
            if isinstance(arg.value, IntValueNode):
                return int(arg.value.value)
            if isinstance(arg.value, VariableNode):
                value = variables.get(arg.value.name.value)
                return int(value) if isinstance(value, int) else None
    return None


def _selection_cost(
    selection_set: SelectionSetNode | None,
    parent: GraphQLObjectType,
    fragments: dict[str, FragmentDefinitionNode],
    variables: dict[str, Any],
    *,
    top_mutation: bool = False,
) -> int:
    total = 0
    for node in _fields(selection_set, fragments):
        if node.name.value.startswith("__"):
            continue
        field = parent.fields[node.name.value]
        named = get_named_type(field.type)
        if top_mutation:
            assert isinstance(named, GraphQLObjectType)
            total += MUTATION_COST + _selection_cost(
                node.selection_set, named, fragments, variables
            )
            continue
        if is_leaf_type(named):
            continue
        assert isinstance(named, GraphQLObjectType)
        first = _first(node, variables)
        if named.name.endswith("Connection"):
            if first is None:
                raise CostRefused(
                    f"you must provide one of first or last (field '{node.name.value}')",
                    "missingFirstOrLast",
                )
            per_item = 0
            for inner in _fields(node.selection_set, fragments):
                if inner.name.value == "edges":
                    edge = get_named_type(named.fields["edges"].type)
                    assert isinstance(edge, GraphQLObjectType)
                    for n in _fields(inner.selection_set, fragments):
                        if n.name.value == "node":
                            node_type = get_named_type(edge.fields["node"].type)
                            assert isinstance(node_type, GraphQLObjectType)
                            per_item += 1 + _selection_cost(
                                n.selection_set, node_type, fragments, variables
                            )
                elif inner.name.value == "nodes":
                    node_type = get_named_type(named.fields["nodes"].type)
                    assert isinstance(node_type, GraphQLObjectType)
                    per_item += 1 + _selection_cost(
                        inner.selection_set, node_type, fragments, variables
                    )
            total += 2 + first * per_item
            continue
        item = 1 + _selection_cost(node.selection_set, named, fragments, variables)
        is_list = is_list_type(get_nullable_type(field.type))  # type: ignore[arg-type]
        total += item * (first if is_list and first is not None else 1)
    return total


def idempotency_key(
    operation: OperationDefinitionNode, field: str, variables: dict[str, Any]
) -> str | None:
    for node in operation.selection_set.selections:
        if isinstance(node, FieldNode) and node.name.value == field:
            for directive in node.directives or ():
                if directive.name.value == "idempotent":
                    value = directive.arguments[0].value
                    if isinstance(value, VariableNode):
                        return str(variables.get(value.name.value))
                    return str(getattr(value, "value", ""))
    return None

"""The OpenAPI document: what django-ninja writes from the operations, and what it cannot.

An integrator generates a client from ``openapi.json``; it must be the API the server
enforces. Added here: every refusal as a problem, the ``Idempotency-Key``'s rules and its
replayed 200, the 415 of a body that is not JSON, the links between operations (what a
client, or schemathesis's stateful phase, follows: a ticket made, read, run), the help
desk's signed webhook (a plain view, not a ninja operation) and the events Deskhand sends
(``webhooks``, OpenAPI 3.1).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel

from deskhand.domain.apikeys import store
from deskhand.web.api import webhooks
from deskhand.web.api.problems import CONTENT_TYPE

ERROR_STATUSES = (400, 401, 403, 404, 409, 422, 429)
PREFIX = "/api/v1"

PROBLEM = {
    "type": "object",
    "title": "Problem",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "field": {"type": "string"},
    },
}

# (method, path) -> link name -> (method, path of the operation it leads to, what it passes).
# A value naming ``requestBody`` is the body the next request sends.
LINKS: dict[tuple[str, str], dict[str, tuple[str, str, dict[str, Any]]]] = {
    ("post", "/tickets"): {
        "ReadTheTicket": (
            "get",
            "/tickets/{reference}",
            {"reference": "$response.body#/reference"},
        ),
        "AddAMessage": (
            "post",
            "/tickets/{reference}/messages",
            {"reference": "$response.body#/reference"},
        ),
        "StartARun": ("post", "/runs", {"requestBody": {"ticket": "$response.body#/reference"}}),
    },
    ("get", "/tickets"): {
        "ReadTheFirst": (
            "get",
            "/tickets/{reference}",
            {"reference": "$response.body#/items/0/reference"},
        ),
    },
    ("post", "/tickets/{reference}/messages"): {
        "ReadTheTicket": ("get", "/tickets/{reference}", {"reference": "$response.body#/ticket"}),
    },
    ("post", "/runs"): {
        "ReadTheRun": ("get", "/runs/{run_id}", {"run_id": "$response.body#/id"}),
        "SteerTheRun": ("post", "/runs/{run_id}/steer", {"run_id": "$response.body#/id"}),
        "CancelTheRun": ("post", "/runs/{run_id}/cancel", {"run_id": "$response.body#/id"}),
    },
    ("get", "/runs"): {
        "ReadTheFirst": ("get", "/runs/{run_id}", {"run_id": "$response.body#/items/0/id"}),
    },
    ("get", "/approvals"): {
        "ReadTheFirst": (
            "get",
            "/approvals/{approval_id}",
            {"approval_id": "$response.body#/items/0/id"},
        ),
    },
    ("get", "/approvals/{approval_id}"): {
        "DecideIt": (
            "post",
            "/approvals/{approval_id}/decide",
            {"approval_id": "$response.body#/id"},
        ),
        "ReadItsRun": ("get", "/runs/{run_id}", {"run_id": "$response.body#/run_id"}),
    },
}

STANDARD_WEBHOOK_HEADERS = [
    ("webhook-id", "The message's id, the same on every retry: deduplicate on it."),
    ("webhook-timestamp", "Seconds since the epoch; refused outside five minutes of our clock."),
    (
        "webhook-signature",
        'Space-separated "v1,<base64 HMAC-SHA256 of {id}.{timestamp}.{body}>" under the '
        "whsec_ secret (standardwebhooks.com).",
    ),
]


def complete(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM
    for methods in schema.get("paths", {}).values():
        for operation in methods.values():
            _refusals(operation)
    _links(schema)
    _helpdesk(schema, components)
    _events(schema, components)
    return schema


def _problem(status: int) -> dict[str, Any]:
    return {
        "description": HTTPStatus(status).phrase,
        "content": {CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def _refusals(operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    # Ninja keys its own statuses as ints; the document's JSON has strings.
    for status in [s for s in responses if not isinstance(s, str)]:
        responses[str(status)] = responses.pop(status)
    for status in ERROR_STATUSES:
        responses[str(status)] = _problem(status)
    if "requestBody" in operation:
        responses["415"] = _problem(415)  # a body that is not application/json
    for parameter in operation.get("parameters", []):
        if parameter.get("name") != "Idempotency-Key":
            continue
        parameter["description"] = (
            "Send the same key again with the same JSON body to get the first answer again, "
            "never a second write (docs/api.md)."
        )
        parameter["schema"] = {
            "type": "string",
            "minLength": 1,
            "maxLength": store.KEY_MAX,
            "pattern": store.KEY_PATTERN,
        }
        # A kept answer erased with its customer (deskhand/domain/apikeys/erasure.py).
        responses["410"] = _problem(410)
        created = responses.get("201", {})
        replayed = {
            "Idempotent-Replayed": {
                "description": "true: nothing was written this time",
                "schema": {"type": "string", "enum": ["true"]},
            }
        }
        if "200" in responses:  # an operation whose own answer is a 200 (an upsert's update)
            responses["200"]["description"] += "; or a retry: the first answer, replayed"
            responses["200"]["headers"] = replayed
            continue
        responses["200"] = {
            "description": "A retry: the answer the first request got, replayed",
            "headers": replayed,
            "content": created.get("content", {}),
        }


def _operation_id(schema: dict[str, Any], method: str, path: str) -> str:
    return str(schema["paths"][PREFIX + path][method]["operationId"])


def _links(schema: dict[str, Any]) -> None:
    for (method, path), links in LINKS.items():
        operation = schema["paths"][PREFIX + path][method]
        for status in ("200", "201"):
            response = operation["responses"].get(status)
            if response is None or "content" not in response or not response["content"]:
                continue
            response["links"] = {
                name: {"operationId": _operation_id(schema, to_method, to_path), **passes}
                if "requestBody" in passes
                else {
                    "operationId": _operation_id(schema, to_method, to_path),
                    "parameters": passes,
                }
                for name, (to_method, to_path, passes) in links.items()
            }


def _component(components: dict[str, Any], model: type[BaseModel]) -> dict[str, str]:
    """``model`` (and the models it holds) as components; a reference to it."""
    found = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in found.pop("$defs", {}).items():
        components[name] = definition
    components[model.__name__] = found
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _header(name: str, description: str) -> dict[str, Any]:
    return {
        "in": "header",
        "name": name,
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1},
    }


def _helpdesk(schema: dict[str, Any], components: dict[str, Any]) -> None:
    schemes = schema["components"].setdefault("securitySchemes", {})
    schemes["StandardWebhooks"] = {
        "type": "apiKey",
        "in": "header",
        "name": "webhook-signature",
        "description": "Standard Webhooks, under the help-desk source's whsec_ secret "
        "(manage.py helpdesk_source): the signature is the credential, not an API key.",
    }
    accepted = {"application/json": {"schema": _component(components, webhooks.HelpdeskAccepted)}}
    body = {
        "oneOf": [
            _component(components, webhooks.HelpdeskTicketCreated),
            _component(components, webhooks.HelpdeskMessageCreated),
        ],
        "discriminator": {"propertyName": "type"},
    }
    slug = {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"}
    schema["paths"][PREFIX + "/helpdesk/{merchant}/{source}"] = {
        "post": {
            "operationId": "helpdesk_webhook",
            "summary": "A help desk's signed delivery: a ticket, or a customer's message",
            "tags": ["helpdesk"],
            "security": [{"StandardWebhooks": []}],
            "parameters": [
                {"in": "path", "name": "merchant", "required": True, "schema": slug},
                {"in": "path", "name": "source", "required": True, "schema": slug},
                *(_header(n, d) for n, d in STANDARD_WEBHOOK_HEADERS[:2]),
            ],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {
                "201": {
                    "description": "Stored: the ticket and the thread line",
                    "content": accepted,
                },
                "200": {"description": "A redelivery: what the first did", "content": accepted},
                **{str(s): _problem(s) for s in (400, 401, 404, 422)},
            },
        }
    }


def _events(schema: dict[str, Any], components: dict[str, Any]) -> None:
    """OpenAPI 3.1's ``webhooks``: what the merchant's notification webhook, and a help
    desk's ``reply_url``, receive; each a POST signed with Standard Webhooks."""
    approval = _component(components, webhooks.ApprovalEvent)
    events: list[tuple[str, str, dict[str, str], bool]] = [
        ("approval.requested", "A run parks at the gate for an irreversible call", approval, True),
        ("approval.escalated", "Still waiting after the merchant's SLA", approval, True),
        ("approval.expiring", "It will expire soon without a decision", approval, True),
        (
            "run.finished",
            "A run ended, whatever its status",
            _component(components, webhooks.RunFinishedEvent),
            True,
        ),
        (
            "refund.created",
            "A refund was made on an order the store pushed",
            _component(components, webhooks.RefundCreatedEvent),
            True,
        ),
        (
            "helpdesk.reply",
            "The agent's reply on a help desk's ticket, to the source's reply_url",
            _component(components, webhooks.DeskReply),
            False,
        ),
    ]
    schema["webhooks"] = {
        name: {
            "post": {
                "summary": summary,
                "operationId": f"event_{name.replace('.', '_')}",
                "parameters": [
                    *(_header(n, d) for n, d in STANDARD_WEBHOOK_HEADERS),
                    *([_header("X-Deskhand-Event", f"{name}")] if merchant_hook else []),
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}},
                "responses": {
                    "2XX": {"description": "Taken. Anything else is retried with backoff."}
                },
            }
        }
        for name, summary, ref, merchant_hook in events
    }

"""A strict double of the Anthropic Messages API, for the real ``anthropic`` SDK.

A stdlib ``http.server`` on 127.0.0.1 (port 0) in a daemon thread. Point the
SDK at ``api.url`` with any key the double accepts and it answers
``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

**Strict.** It refuses what the real API refuses, with the real error shape
(``{"type": "error", "error": {"type": ..., "message": ...}}``) and a
``request-id`` header: 401 ``authentication_error`` for a missing or wrong key
(``x-api-key`` or ``Authorization: Bearer``); 404 ``not_found_error`` for an
unknown model; 400 ``invalid_request_error`` for unknown top-level fields or
block fields, missing required fields, a first message that is not the user's,
roles that do not alternate, empty text blocks, a ``tool_result`` whose
``tool_use_id`` answers no ``tool_use`` of the previous assistant turn, a
``tool_use`` not answered by the next user turn, tool names outside
``^[a-zA-Z0-9_-]{1,64}$`` or repeated, an ``input_schema`` that is not an object
schema (and, for ``strict`` tools, one that is not closed or uses a keyword
strict mode rejects), ``max_tokens`` above the model's output limit, and more
than four ``cache_control`` breakpoints. ``stream: true`` is refused too (the
double does not speak SSE; the provider does not stream).

**Token counting** (deterministic, documented so tests can compute it): the
request is a sequence of blocks — each tool definition, then each system text
block, then each content block of each message in order (a string content or
system is one text block). A block costs ``ceil(len(canonical) / 4)`` tokens,
where ``canonical`` is the UTF-8 of ``json.dumps(block_without_cache_control,
sort_keys=True, separators=(",", ":"), ensure_ascii=False)``; message blocks
also fold in their role. Output tokens are counted the same way over the reply's
content blocks, unless a scripted reply says otherwise.

**Prompt caching** follows the real prefix rules: a block carrying
``cache_control`` is a breakpoint, and the prefix up to and including it
(tools → system → messages, per model) is written to the cache if it is at
least the model's minimum cacheable length (``MODELS``). A request reads the
longest cached prefix ending at one of its breakpoints or within the 20 blocks
before one (the API's lookback), so a breakpoint on the newest message reads
the previous turn's. ``cache_read_input_tokens`` is that prefix,
``cache_creation_input_tokens`` what is newly written beyond it, and
``input_tokens`` the rest. Entries live for their TTL (5 minutes, or ``1h``)
from last use, measured on the injectable ``clock``.

**Scripted.** ``reply()``, ``error()``, ``rate_limited()``, ``overloaded()``,
``server_error()``, ``drop()``, ``raw_reply()`` queue what the next valid requests get (each can
be delayed with ``delay=``); with the queue empty the ``responder`` decides (by
default: end the turn with a short text). Every ``tool_use`` it returns gets a
fresh random ``toolu_…`` id unless the reply was scripted with
``keep_ids=True``. Every request is recorded in ``requests`` (path, headers,
body, status answered). ``text()`` and ``tool_use()`` build reply blocks.

Where it is stricter than the API, on purpose: the API today combines
consecutive turns of one role, the double refuses them (so the loop never
relies on that merge), and it does not stream.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_KEY = "sk-ant-double-0000"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    max_output: int
    min_cacheable: int


# Output limits and minimum cacheable prompt lengths: from the models' overview pages and
# the prompt-caching docs where published; for models whose minimum we did not find
# (Opus/Sonnet/Haiku 5.5, the 5.2 models, Mythos Preview) 1024 is assumed.
MODELS: dict[str, ModelSpec] = {
    "claude-fable-5-2": ModelSpec(128_000, 1024),
    "claude-mythos-5-2": ModelSpec(128_000, 1024),
    "claude-fable-5-1": ModelSpec(128_000, 512),
    "claude-mythos-5-1": ModelSpec(128_000, 512),
    "claude-fable-5": ModelSpec(128_000, 512),
    "claude-mythos-5": ModelSpec(128_000, 512),
    "claude-mythos-preview": ModelSpec(128_000, 1024),
    "claude-opus-5-5": ModelSpec(128_000, 1024),
    "claude-opus-5": ModelSpec(128_000, 512),
    "claude-opus-4-8": ModelSpec(128_000, 1024),
    "claude-opus-4-7": ModelSpec(128_000, 4096),
    "claude-opus-4-6": ModelSpec(128_000, 4096),
    "claude-opus-4-5": ModelSpec(64_000, 4096),
    "claude-opus-4-5-20251101": ModelSpec(64_000, 4096),
    "claude-sonnet-5-5": ModelSpec(128_000, 1024),
    "claude-sonnet-5": ModelSpec(128_000, 1024),
    "claude-sonnet-4-6": ModelSpec(64_000, 2048),
    "claude-haiku-5-5": ModelSpec(128_000, 1024),
    "claude-haiku-4-5": ModelSpec(64_000, 4096),
    "claude-haiku-4-5-20251001": ModelSpec(64_000, 4096),
}

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOP_LEVEL = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "thinking",
        "service_tier",
        "output_config",
        "cache_control",
        "container",
        "inference_geo",
        "speed",
    }
)
BLOCK_FIELDS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control", "caller"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature", "cache_control"}),
    "redacted_thinking": frozenset({"type", "data", "cache_control"}),
}
TOOL_FIELDS = frozenset(
    {"name", "description", "input_schema", "cache_control", "strict", "type", "input_examples"}
)
STRICT_FORBIDDEN = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
    }
)
STOP_REASONS = frozenset(
    {
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
MAX_BREAKPOINTS = 4
LOOKBACK = 20
TTLS = {"5m": 300.0, "1h": 3600.0}


class Refused(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _invalid(message: str) -> Refused:
    return Refused(400, "invalid_request_error", message)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tokens_of(value: Any) -> int:
    """The double's token count for one block: a token per 4 bytes of canonical JSON, rounded up."""
    # surrogatepass: a scripted hostile reply may hold a lone surrogate; count it, do not crash.
    return math.ceil(len(canonical(value).encode("utf-8", "surrogatepass")) / 4)


def _without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


@dataclasses.dataclass
class Segment:
    key: str  # what the prefix hash covers
    tokens: int
    cache_control: dict[str, Any] | None


@dataclasses.dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    at: float = dataclasses.field(default_factory=time.time)  # when it arrived (epoch s)


@dataclasses.dataclass
class Scripted:
    status: int = 200
    content: list[dict[str, Any]] | None = None
    stop_reason: str = "end_turn"
    output_tokens: int | None = None
    keep_ids: bool = False
    error_type: str = ""
    message: str = ""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    raw: bytes | None = None  # sent as the body as it is (``raw_reply``): any status, any bytes


Responder = Callable[[dict[str, Any]], tuple[list[dict[str, Any]], str]]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, id: str | None = None, **input: Any) -> dict[str, Any]:
    """A tool_use block for ``reply()``; ``id`` is replaced by a fresh one unless ``keep_ids``."""
    return {"type": "tool_use", "id": id or "toolu_placeholder", "name": name, "input": input}


def end_turn_responder(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    return [{"type": "text", "text": "Done."}], "end_turn"


def _message_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


class MessagesApi:
    def __init__(
        self,
        *,
        api_key: str | None = DEFAULT_KEY,
        responder: Responder | None = None,
        clock: Callable[[], float] = time.monotonic,
        mint_ids: bool = True,
        usage: tuple[int, int] | None = None,
    ) -> None:
        """``api_key=None`` accepts any non-empty key. ``usage=(input, output)`` reports those
        fixed counts instead of the counting rule (and no caching), for tests that need round
        numbers."""
        self.api_key = api_key
        self.responder = responder or end_turn_responder
        self.clock = clock
        self.mint_ids = mint_ids
        self.fixed_usage = usage
        self.script: collections.deque[Scripted] = collections.deque()
        # Set by ``spend_budget``: the next 200 says its input-token budget is spent until then.
        self._budget_reset: float | None = None
        self.requests: list[Seen] = []
        self.cache: dict[str, tuple[float, float]] = {}  # prefix hash -> (expires_at, ttl)
        self._lock = threading.Lock()
        self._n = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                api._handle(self)

            def do_GET(self) -> None:
                api._send(self, 404, _error_body("not_found_error", f"Not found: {self.path}"))

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> MessagesApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> MessagesApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- scripting -------------------------------------------------------------------

    def reply(
        self,
        content: list[dict[str, Any]],
        stop_reason: str = "end_turn",
        *,
        output_tokens: int | None = None,
        keep_ids: bool = False,
        delay: float = 0.0,
    ) -> None:
        if stop_reason not in STOP_REASONS:
            raise ValueError(f"not a stop reason the API sends: {stop_reason!r}")
        self.script.append(
            Scripted(
                content=content,
                stop_reason=stop_reason,
                output_tokens=output_tokens,
                keep_ids=keep_ids,
                delay=delay,
            )
        )

    def error(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.script.append(
            Scripted(
                status=status,
                error_type=error_type,
                message=message,
                headers=headers or {},
                delay=delay,
            )
        )

    def spend_budget(self, seconds: int) -> None:
        """The next successful reply says, as the API does, that the input-token budget is
        spent (``remaining: 0``) until ``seconds`` from now; a client that sends again
        before then would be refused."""
        self._budget_reset = time.time() + seconds

    def rate_limited(self, retry_after: int = 1, *, tokens_remaining: int = 0) -> None:
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + retry_after))
        self.error(
            429,
            "rate_limit_error",
            "This request would exceed your organization's rate limit. Please try again later.",
            headers={
                "retry-after": str(retry_after),
                "anthropic-ratelimit-requests-limit": "50",
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset,
                "anthropic-ratelimit-input-tokens-limit": "30000",
                "anthropic-ratelimit-input-tokens-remaining": str(tokens_remaining),
                "anthropic-ratelimit-input-tokens-reset": reset,
                "anthropic-ratelimit-output-tokens-limit": "8000",
                "anthropic-ratelimit-output-tokens-remaining": "8000",
                "anthropic-ratelimit-output-tokens-reset": reset,
            },
        )

    def overloaded(self, times: int = 1) -> None:
        for _ in range(times):
            self.error(529, "overloaded_error", "Overloaded")

    def server_error(self, times: int = 1, status: int = 500) -> None:
        for _ in range(times):
            self.error(status, "api_error", "Internal server error")

    def drop(self) -> None:
        """The next request's connection is closed without an answer."""
        self.script.append(Scripted(drop=True))

    def raw_reply(
        self,
        body: bytes | dict[str, Any],
        status: int = 200,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        """The next valid request is answered with exactly this body: a hostile or broken server.

        A dict is sent as JSON without any of the checks ``reply()`` makes (an unknown stop
        reason, missing usage, a tool call whose input is a list, an empty content list…);
        bytes are sent as they are (a body that is not JSON at all).
        """
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.script.append(Scripted(status=status, raw=data, headers=headers or {}))

    @staticmethod
    def message(
        content: Any, stop_reason: Any = "end_turn", *, usage: Any = None, **extra: Any
    ) -> dict[str, Any]:
        """A message body for ``raw_reply``: the usual fields, any of them overridable."""
        body: dict[str, Any] = {
            "id": "msg_double_raw",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5} if usage is None else usage,
        }
        body.update(extra)
        return body

    # --- what it saw -----------------------------------------------------------------

    @property
    def count(self) -> int:
        """POSTs to /v1/messages received (answered or refused)."""
        with self._lock:
            return sum(1 for s in self.requests if s.path == "/v1/messages")

    def bodies(self) -> list[Any]:
        with self._lock:
            return [s.body for s in self.requests if s.path == "/v1/messages"]

    # --- the server ------------------------------------------------------------------

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("request-id", f"req_double_{secrets.token_hex(8)}")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("content-length") or 0))
        headers = {k.lower(): v for k, v in h.headers.items()}
        path = h.path.split("?", 1)[0]
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        seen = Seen(path, headers, body)
        with self._lock:
            self.requests.append(seen)
        try:
            self._authenticate(headers)
            if path not in ("/v1/messages", "/v1/messages/count_tokens"):
                raise Refused(404, "not_found_error", f"Not found: {path}")
            if not isinstance(body, dict):
                raise _invalid("The request body is not valid JSON.")
            counting = path.endswith("count_tokens")
            spec = self._validate(body, counting=counting)
            segments = self._segments(body)
            if counting:
                seen.status = 200
                self._send(h, 200, {"input_tokens": sum(s.tokens for s in segments)})
                return
            scripted = self.script.popleft() if self.script else None
        except Refused as refused:
            seen.status = refused.status
            self._send(h, refused.status, _error_body(refused.kind, refused.message))
            return
        if scripted is not None and scripted.delay:
            time.sleep(scripted.delay)
        if scripted is not None and scripted.drop:
            seen.status = -1
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if scripted is not None and scripted.raw is not None:
            seen.status = scripted.status
            h.send_response(scripted.status)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(scripted.raw)))
            h.send_header("request-id", f"req_double_{secrets.token_hex(8)}")
            for k, v in scripted.headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(scripted.raw)
            return
        if scripted is not None and scripted.status != 200:
            seen.status = scripted.status
            self._send(
                h,
                scripted.status,
                _error_body(scripted.error_type, scripted.message),
                scripted.headers,
            )
            return
        if scripted is not None:
            content, stop_reason = scripted.content or [], scripted.stop_reason
        else:
            content, stop_reason = self.responder(body)
        content = json.loads(json.dumps(content))
        if self.mint_ids and not (scripted is not None and scripted.keep_ids):
            for block in content:
                if block.get("type") == "tool_use":
                    block["id"] = f"toolu_{secrets.token_urlsafe(18)}"
        usage = self._usage(body["model"], spec, segments)
        out = scripted.output_tokens if scripted is not None else None
        if out is None:
            out = (
                self.fixed_usage[1] if self.fixed_usage else sum(tokens_of(b) for b in content) or 1
            )
        usage["output_tokens"] = out
        with self._lock:
            self._n += 1
            n = self._n
        seen.status = 200
        self._send(
            h,
            200,
            {
                "id": f"msg_double_{n:04d}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": usage,
            },
            self._rate_headers(),
        )

    def _rate_headers(self) -> dict[str, str]:
        headers = {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
        }
        with self._lock:
            reset, self._budget_reset = self._budget_reset, None
        if reset is not None:
            headers["anthropic-ratelimit-input-tokens-limit"] = "30000"
            headers["anthropic-ratelimit-input-tokens-remaining"] = "0"
            headers["anthropic-ratelimit-input-tokens-reset"] = time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset)
            )
        return headers

    def _authenticate(self, headers: dict[str, str]) -> None:
        key = headers.get("x-api-key")
        auth = headers.get("authorization", "")
        if key is None and auth.lower().startswith("bearer "):
            key = auth[7:]
        if not key:
            raise Refused(401, "authentication_error", "x-api-key header is required")
        if (self.api_key is not None and key != self.api_key) or not key.strip():
            raise Refused(401, "authentication_error", "invalid x-api-key")

    # --- validation ------------------------------------------------------------------

    def _validate(self, body: dict[str, Any], *, counting: bool) -> ModelSpec:
        allowed = TOP_LEVEL - {"max_tokens", "stream"} if counting else TOP_LEVEL
        for field in body:
            if field not in allowed:
                raise _invalid(f"{field}: Extra inputs are not permitted")
        required = ("model", "messages") if counting else ("model", "messages", "max_tokens")
        for field in required:
            if field not in body:
                raise _invalid(f"{field}: Field required")
        model = body["model"]
        if not isinstance(model, str) or model not in MODELS:
            raise Refused(404, "not_found_error", f"model: {model}")
        spec = MODELS[model]
        if not counting:
            max_tokens = body["max_tokens"]
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
                raise _invalid("max_tokens: Input should be a valid integer greater than 0")
            if max_tokens > spec.max_output:
                raise _invalid(
                    f"max_tokens: {max_tokens} > {spec.max_output}, which is the maximum "
                    f"allowed number of output tokens for {model}"
                )
            if body.get("stream"):
                raise _invalid("stream: this double does not stream; send stream=false")
        self._validate_tools(body.get("tools"))
        self._validate_system(body.get("system"))
        self._validate_messages(body["messages"])
        marks = self._breakpoints(body)
        if marks > MAX_BREAKPOINTS:
            raise _invalid(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {marks}."
            )
        return spec

    def _validate_tools(self, tools: Any) -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            raise _invalid("tools: Input should be a valid list")
        names: set[str] = set()
        for i, tool in enumerate(tools):
            where = f"tools.{i}"
            if not isinstance(tool, dict):
                raise _invalid(f"{where}: Input should be an object")
            for field in tool:
                if field not in TOOL_FIELDS:
                    raise _invalid(f"{where}.{field}: Extra inputs are not permitted")
            name = tool.get("name")
            if not isinstance(name, str) or not TOOL_NAME.match(name):
                raise _invalid(
                    f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
                )
            if name in names:
                raise _invalid("tools: Tool names must be unique.")
            names.add(name)
            schema = tool.get("input_schema")
            if not isinstance(schema, dict):
                raise _invalid(f"{where}.input_schema: Field required")
            if schema.get("type") != "object":
                raise _invalid(f"{where}.input_schema.type: Input should be 'object'")
            if tool.get("strict"):
                _check_strict_schema(schema, f"{where}.input_schema")
            self._check_cache_control(tool.get("cache_control"), where)

    def _validate_system(self, system: Any) -> None:
        if system is None or isinstance(system, str):
            return
        if not isinstance(system, list):
            raise _invalid("system: Input should be a valid string or list")
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _invalid(f"system.{i}: Input tag does not match the expected tag 'text'")
            self._check_block(block, f"system.{i}")

    def _validate_messages(self, messages: Any) -> None:
        if not isinstance(messages, list) or not messages:
            raise _invalid("messages: at least one message is required")
        previous_role = None
        pending: list[str] = []  # tool_use ids of the previous assistant turn
        for i, message in enumerate(messages):
            where = f"messages.{i}"
            if not isinstance(message, dict):
                raise _invalid(f"{where}: Input should be an object")
            for field in message:
                if field not in ("role", "content"):
                    raise _invalid(f"{where}.{field}: Extra inputs are not permitted")
            role = message.get("role")
            if role not in ("user", "assistant"):
                raise _invalid(f"{where}.role: Input should be 'user' or 'assistant'")
            if i == 0 and role != "user":
                raise _invalid('messages: first message must use the "user" role')
            if role == previous_role:
                raise _invalid(
                    f'messages: roles must alternate between "user" and "assistant", but '
                    f'found multiple "{role}" roles in a row'
                )
            content = message.get("content")
            if isinstance(content, str):
                if not content.strip():
                    raise _invalid(f"{where}: text content blocks must be non-empty")
                blocks: list[dict[str, Any]] = []
            elif isinstance(content, list) and content:
                blocks = content
            else:
                raise _invalid(f"{where}.content: messages must have non-empty content")
            for j, block in enumerate(blocks):
                self._check_block(block, f"{where}.content.{j}", role=role)
            if role == "user":
                results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
                unexpected = [r for r in results if r not in pending]
                if unexpected:
                    raise _invalid(
                        f"{where}.content: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {', '.join(unexpected)}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message."
                    )
                missing = [p for p in pending if p not in results]
                if missing:
                    raise _invalid(
                        f"messages.{i - 1}: `tool_use` ids were found without `tool_result` "
                        f"blocks immediately after: {', '.join(missing)}. Each `tool_use` block "
                        "must have a corresponding `tool_result` block in the next message."
                    )
                pending = []
            else:
                pending = [b["id"] for b in blocks if b.get("type") == "tool_use"]
                if len(set(pending)) != len(pending):
                    raise _invalid(f"{where}: `tool_use` ids must be unique")
            previous_role = role
        # A last assistant turn with tool calls would be a prefill that can never be answered.
        if pending:
            raise _invalid(
                f"messages.{len(messages) - 1}: `tool_use` ids were found without "
                f"`tool_result` blocks immediately after: {', '.join(pending)}. Each "
                "`tool_use` block must have a corresponding `tool_result` block in the next "
                "message."
            )

    def _check_block(self, block: Any, where: str, role: str | None = None) -> None:
        if not isinstance(block, dict):
            raise _invalid(f"{where}: Input should be an object")
        kind = block.get("type")
        fields = BLOCK_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            raise _invalid(f"{where}.type: unknown content block type {kind!r}")
        for field in block:
            if field not in fields:
                raise _invalid(f"{where}.{kind}.{field}: Extra inputs are not permitted")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise _invalid(f"{where}.text: Field required")
            if not text.strip():
                raise _invalid(f"{where}: text content blocks must contain non-whitespace text")
        elif kind == "tool_use":
            if role == "user":
                raise _invalid(f"{where}: tool_use blocks may only appear in assistant turns")
            if not isinstance(block.get("id"), str) or not re.match(
                r"^[a-zA-Z0-9_-]+$", block["id"]
            ):
                raise _invalid(
                    f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                )
            if not isinstance(block.get("name"), str) or not TOOL_NAME.match(block["name"]):
                raise _invalid(
                    f"{where}.tool_use.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
                )
            if not isinstance(block.get("input"), dict):
                raise _invalid(f"{where}.tool_use.input: Input should be a valid dictionary")
        elif kind == "tool_result":
            if role == "assistant":
                raise _invalid(f"{where}: tool_result blocks may only appear in user turns")
            if not isinstance(block.get("tool_use_id"), str):
                raise _invalid(f"{where}.tool_result.tool_use_id: Field required")
            inner = block.get("content", "")
            if isinstance(inner, list):
                for k, sub in enumerate(inner):
                    self._check_block(sub, f"{where}.content.{k}", role="tool_result")
            elif not isinstance(inner, str):
                raise _invalid(f"{where}.tool_result.content: Input should be a string or list")
        self._check_cache_control(block.get("cache_control"), where)

    def _check_cache_control(self, cc: Any, where: str) -> None:
        if cc is None:
            return
        if not isinstance(cc, dict) or cc.get("type") != "ephemeral":
            raise _invalid(f"{where}.cache_control.type: Input should be 'ephemeral'")
        if set(cc) - {"type", "ttl"} or cc.get("ttl", "5m") not in TTLS:
            raise _invalid(f"{where}.cache_control: ttl must be '5m' or '1h'")

    def _breakpoints(self, body: dict[str, Any]) -> int:
        def count(value: Any) -> int:
            if isinstance(value, dict):
                here = 1 if value.get("cache_control") is not None else 0
                return here + sum(count(v) for k, v in value.items() if k != "cache_control")
            if isinstance(value, list):
                return sum(count(v) for v in value)
            return 0

        top = 1 if body.get("cache_control") is not None else 0
        return top + count(body.get("tools")) + count(body.get("system")) + count(body["messages"])

    # --- tokens and caching ----------------------------------------------------------

    def _segments(self, body: dict[str, Any]) -> list[Segment]:
        out: list[Segment] = []
        for tool in body.get("tools") or []:
            plain = _without_cache_control(tool)
            out.append(
                Segment("tool:" + canonical(plain), tokens_of(plain), tool.get("cache_control"))
            )
        system = body.get("system")
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
        for block in blocks:
            plain = _without_cache_control(block)
            out.append(
                Segment("system:" + canonical(plain), tokens_of(plain), block.get("cache_control"))
            )
        for message in body["messages"]:
            for block in _message_blocks(message):
                plain = _without_cache_control(block)
                tagged = {"role": message["role"], "block": plain}
                out.append(
                    Segment(
                        "msg:" + canonical(tagged), tokens_of(tagged), block.get("cache_control")
                    )
                )
        return out

    def _usage(self, model: str, spec: ModelSpec, segments: list[Segment]) -> dict[str, int]:
        total = sum(s.tokens for s in segments)
        if self.fixed_usage is not None:
            return {
                "input_tokens": self.fixed_usage[0],
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
        hashes: list[str] = []
        running: list[int] = []
        h = hashlib.sha256(model.encode()).hexdigest()
        acc = 0
        for s in segments:
            h = hashlib.sha256((h + s.key).encode()).hexdigest()
            acc += s.tokens
            hashes.append(h)
            running.append(acc)
        points = [i for i, s in enumerate(segments) if s.cache_control is not None]
        now = self.clock()
        with self._lock:
            for key in [k for k, (exp, _) in self.cache.items() if exp <= now]:
                del self.cache[key]
            read_end = -1
            for bp in points:
                for j in range(bp, max(-1, bp - LOOKBACK), -1):
                    if hashes[j] in self.cache:
                        read_end = max(read_end, j)
                        break
            read = running[read_end] if read_end >= 0 else 0
            if read_end >= 0:
                _, ttl = self.cache[hashes[read_end]]
                self.cache[hashes[read_end]] = (now + ttl, ttl)
            written_end = read_end
            for bp in points:
                ttl = TTLS[segments[bp].cache_control.get("ttl", "5m")]  # type: ignore[union-attr]
                if running[bp] >= spec.min_cacheable and bp > read_end:
                    self.cache[hashes[bp]] = (now + ttl, ttl)
                    written_end = max(written_end, bp)
            created = running[written_end] - read if written_end > read_end else 0
        return {
            "input_tokens": total - read - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a dropped connection is the point of ``drop()``, not a failure


def _check_strict_schema(schema: Any, where: str) -> None:
    """Strict tools: every object closed (additionalProperties false), no unsupported keywords."""

    def walk(node: Any, at: str) -> Iterator[str]:
        if isinstance(node, dict):
            if node.get("type") == "object" and node.get("additionalProperties") is not False:
                yield f"{at}: strict tools require 'additionalProperties': false on every object"
            for key in node:
                if key in STRICT_FORBIDDEN:
                    yield f"{at}: strict tools do not support the '{key}' keyword"
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    for name, sub in value.items():
                        yield from walk(sub, f"{at}.properties.{name}")
                elif isinstance(value, dict | list):
                    yield from walk(value, f"{at}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, f"{at}.{i}")

    for problem in walk(schema, where):
        raise _invalid(problem)


def _error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}

"""Claude through the Messages API, with the one retry layer a model call has.

The request is the same shape every turn — one cached system block, the
strict tool schemas in a fixed order, the history — so the prompt cache stays
warm across a run.

**Retries live here and only here**, under the ``MODEL`` policy of ``deskhand.infra.retry``
(the module of every retry policy, which counts the worst case). The SDK is built with
``max_retries=0``; ``complete`` retries what can succeed later — HTTP 429, 500, 502, 503,
504 and 529, connection errors and timeouts — with exponential backoff (jittered,
capped) that honours the API's ``retry-after`` / ``retry-after-ms`` (capped at
``RetryPolicy.max_delay``), until ``RetryPolicy.max_attempts`` or its sleeping
budget is spent. Anything else (400, 401, 403, 404, 413, …) fails at once. Either
way the caller gets a ``ProviderError`` naming the API's error type and message,
``transient`` saying which class it is, the last SDK exception as its
``__cause__``, and never the API key. A failed attempt is not billed, so cost
is counted once, for the reply that came back.

**Waits the API asks for can be handed back.** When the model step runs where it can
sleep durably (``base.return_waits``), a 429/529 that names a wait (``retry-after``, or an
exhausted ``anthropic-ratelimit-*`` budget's reset) is raised at once with ``retry_after``
set; the workflow sleeps it (``DBOS.sleep_async``: no thread held) and calls again, within
the same ``RetryPolicy`` (agent.run.turns, docs/rate-limits.md). Backoff with no named wait is
still slept here: it is seconds, and rare.

**No streaming; a timeout sized to ``max_tokens``.** The read timeout is twice
the time the SDK itself expects a non-streaming reply of ``max_tokens`` to take
(an hour per 128k tokens), at least 60 s and at most 600 s; connecting gets 5 s.
The SDK refuses non-streaming calls it expects to pass ten minutes, so
``max_tokens`` above ``MAX_NONSTREAMING_TOKENS`` is refused up front.

**One SDK client per worker process** per (key, base URL), shared by every
run and turn (``client_for``): its connection pool survives between calls.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2

from agent.providers import pricing
from agent.providers.anthropic_reply import read_message
from agent.providers.base import ModelReply, return_waits
from agent.providers.base import ProviderError as ProviderError
from deskhand.infra.retry import MODEL_TRANSIENT_STATUSES as TRANSIENT_STATUSES
from deskhand.infra.retry import RetryPolicy as RetryPolicy
from deskhand.infra.retry import retry_call

_KIND_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# The SDK's own estimate: a non-streaming reply takes up to an hour per 128k output tokens,
# and it refuses a non-streaming call it expects to take over ten minutes.
_SECONDS_PER_TOKEN = 3600 / 128_000
MAX_NONSTREAMING_TOKENS = int(600 / _SECONDS_PER_TOKEN)


def request_timeout(max_tokens: int) -> anthropic.Timeout:
    read = min(600.0, max(60.0, 2 * _SECONDS_PER_TOKEN * max_tokens))
    return anthropic.Timeout(read, connect=5.0)


_KEYLIKE = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")


def _redact(text: str, api_key: str) -> str:
    if api_key:
        text = text.replace(api_key, "[redacted]")
    return _KEYLIKE.sub("sk-ant-[redacted]", text)


_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")


def _budget_reset(headers: Any) -> float | None:
    """Seconds until an exhausted ``anthropic-ratelimit-*`` budget resets (None: none is).

    A 429 that names no ``retry-after`` still says, in these headers, which budget ran out
    (``…-remaining: 0``) and when it refills (``…-reset``, RFC 3339): the longest such wait.
    """
    waits = []
    for limit in _LIMITS:
        if headers.get(f"anthropic-ratelimit-{limit}-remaining") != "0":
            continue
        reset = headers.get(f"anthropic-ratelimit-{limit}-reset")
        try:
            at = dt.datetime.fromisoformat(str(reset).replace("Z", "+00:00"))
        except ValueError:
            continue
        waits.append(max(0.0, at.timestamp() - time.time()))
    return max(waits) if waits else None


def _retry_after(headers: Any) -> float | None:
    """Seconds the API asked us to wait (``retry-after-ms``, ``retry-after`` seconds or date,
    else the reset of an exhausted ``anthropic-ratelimit-*`` budget)."""
    if headers is None:
        return None
    try:
        return max(0.0, float(headers.get("retry-after-ms")) / 1000)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return _budget_reset(headers)
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())


def classify(exc: anthropic.APIError, api_key: str = "") -> ProviderError:
    """The SDK's exception as a ``ProviderError`` (one attempt)."""
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        kind = exc.type or _KIND_BY_STATUS.get(status, f"http_{status}")
        message = exc.api_message or f"HTTP {status} with no error message"
        return ProviderError(
            kind=str(kind),
            message=_redact(str(message), api_key)[:1000],
            transient=status in TRANSIENT_STATUSES,
            status=status,
            retry_after=_retry_after(exc.response.headers),
            request_id=exc.request_id,
            history=(str(kind),),
        )
    if not isinstance(exc, anthropic.APIConnectionError):
        # An answer came but the SDK could not read it as a message: retrying will not help.
        return ProviderError(
            kind="invalid_response",
            message=_redact(exc.message, api_key)[:1000],
            transient=False,
            history=("invalid_response",),
        )
    kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection_error"
    cause = exc.__cause__ or exc.__context__
    detail = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
    # A base URL the client cannot even use is configuration, not weather: do not retry it.
    misconfigured = isinstance(cause, httpx2.UnsupportedProtocol | httpx2.InvalidURL)
    if misconfigured:
        kind = "invalid_base_url"
    return ProviderError(
        kind=kind,
        message=_redact(f"no answer from the API ({detail})", api_key)[:1000],
        transient=not misconfigured,
        history=(kind,),
    )


def with_newest_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a cache breakpoint on the newest message's last block (a copy).

    With the one on the system block that is two of the four allowed: tools + system are
    read from the cache by every run of the same prompt, and each turn reads the previous
    turn's prefix (the API looks back 20 blocks from a breakpoint for a cached prefix).
    The conversation itself is never changed, so replay shows what the loop built.
    """
    if not messages or not isinstance(messages[-1].get("content"), list):
        return messages
    last = messages[-1]
    blocks = list(last["content"])
    if not blocks or blocks[-1].get("type") in ("thinking", "redacted_thinking"):
        return messages
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    return [*messages[:-1], {**last, "content": blocks}]


_clients: dict[tuple[str, str | None], anthropic.Anthropic] = {}
_clients_lock = threading.Lock()
# When a *successful* reply's headers say a budget is spent (``…-remaining: 0``), the API
# has told us the next call would be refused until its reset: this process's next call
# waits for that reset (durably, in the workflow, as for a 429) instead of being sent.
# Keyed like the clients (one budget per key and endpoint); monotonic deadlines.
_spent_until: dict[tuple[str, str | None], float] = {}


def _note_budget(key: tuple[str, str | None], headers: Any) -> None:
    wait = _budget_reset(headers) if headers is not None else None
    with _clients_lock:
        if wait:
            _spent_until[key] = time.monotonic() + wait
        else:
            _spent_until.pop(key, None)


def _budget_wait(key: tuple[str, str | None]) -> float | None:
    """Seconds left until a budget a reply said was spent resets (None: nothing to wait for)."""
    with _clients_lock:
        until = _spent_until.get(key)
        if until is None:
            return None
        left = until - time.monotonic()
        if left <= 0:
            del _spent_until[key]
            return None
        return round(left, 3)


def client_for(api_key: str, base_url: str | None) -> anthropic.Anthropic:
    """The process's SDK client for this key and endpoint; built once, never retrying."""
    with _clients_lock:
        client = _clients.get((api_key, base_url))
        if client is None:
            client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0)
            _clients[(api_key, base_url)] = client
        return client


def clear_clients() -> None:
    with _clients_lock:
        _clients.clear()
        _spent_until.clear()


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str | None = None,
        max_tokens: int = 4096,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[float], float] | None = None,
    ) -> None:
        # Priced up front: a model we cannot cost must fail before it spends anything.
        pricing.require_priced(model)
        if not 1 <= max_tokens <= MAX_NONSTREAMING_TOKENS:
            raise ValueError(
                f"max_tokens must be between 1 and {MAX_NONSTREAMING_TOKENS} "
                f"(this provider does not stream), got {max_tokens}"
            )
        self.model = model
        self.max_tokens = max_tokens
        self.retry = retry or RetryPolicy()
        self._api_key = api_key
        self._budget_key = (api_key, base_url)
        self._sleep = sleep
        self._jitter = jitter or (lambda d: d * random.uniform(0.5, 1.0))
        self._timeout = request_timeout(max_tokens)
        self._client = client_for(api_key, base_url)

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": with_newest_breakpoint(messages),
        }
        if tools:
            request["tools"] = tools
        started = time.monotonic()
        reply = self._create(request)
        latency_ms = int((time.monotonic() - started) * 1000)

        usage = reply["usage"]
        input_tokens, output_tokens = usage["input_tokens"], usage["output_tokens"]
        cache_read = usage["cache_read_input_tokens"]
        cache_write = usage["cache_creation_input_tokens"]
        return ModelReply(
            content=reply["content"],
            # Passed through as the API said it ("max_tokens", "pause_turn", "refusal",
            # "model_context_window_exceeded", …; "" when it sent none): the loop decides
            # what each means.
            stop_reason=reply["stop_reason"],
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_micros=pricing.cost_micros(
                self.model, input_tokens, output_tokens, cache_read, cache_write
            ),
            provider=self.name,
            model=self.model,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            latency_ms=latency_ms,
        )

    def _create(self, request: dict[str, Any]) -> dict[str, Any]:
        """One reply, read by ``anthropic_reply.read_message``, through the one retry layer."""
        history: list[str] = []
        slept_out = False  # the last attempt found a budget spent, and its wait was slept

        def attempt() -> dict[str, Any]:
            nonlocal slept_out
            if slept_out:  # slept out the reset it named: send now
                _note_budget(self._budget_key, None)
            spent = _budget_wait(self._budget_key)
            slept_out = spent is not None
            if spent is not None:
                # Not sent: the last reply said this budget is spent until its reset.
                error, cause = _spent_budget(spent), None
            else:
                try:
                    raw = self._client.messages.with_raw_response.create(
                        **request, timeout=self._timeout
                    )
                    _note_budget(self._budget_key, raw.headers)
                    # Read as untrusted bytes, not the SDK's unvalidated model (see anthropic_reply).
                    return read_message(raw.read())
                except anthropic.APIError as exc:
                    error, cause = classify(exc, self._api_key), exc
                except ProviderError as exc:  # a reply that came but cannot be used
                    error, cause = exc, None
            history.append(error.kind)
            error.attempts, error.history = len(history), tuple(history)
            raise error from cause

        return retry_call(
            attempt,
            self.retry,
            transient=_worth_retrying_here,
            named_wait=lambda exc: getattr(exc, "retry_after", None),
            sleep=self._sleep,
            jitter=self._jitter,
        )


def _worth_retrying_here(exc: BaseException) -> bool:
    """A transient error is retried here, unless it names a wait the model step can sleep
    durably (``base.return_waits``): then it is raised at once, and the workflow sleeps it."""
    if not isinstance(exc, ProviderError) or not exc.transient:
        return False
    return exc.retry_after is None or not return_waits.get()


def _spent_budget(seconds: float) -> ProviderError:
    return ProviderError(
        kind="rate_limit_error",
        message=f"the last reply's rate-limit headers said a budget is spent for {seconds:g} s more; not sent",
        transient=True,
        status=429,
        retry_after=seconds,
    )

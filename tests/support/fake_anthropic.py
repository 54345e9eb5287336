"""A local HTTP server speaking enough of the Anthropic Messages API for tests.

It decides with the scripted PolicyProvider and counts every request it
serves: the count is taken at the provider, outside any database
transaction, so a test can prove a resumed run never repeats a paid call.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.providers.policy import PolicyProvider


class FakeAnthropic:
    def __init__(self, input_tokens: int = 1000, output_tokens: int = 100) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._policy = PolicyProvider(
            input_tokens=input_tokens, output_tokens=output_tokens, cost_micros=0
        )
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with fake._lock:
                    fake.requests.append(body)
                    n = len(fake.requests)
                system = (
                    body["system"][0]["text"]
                    if isinstance(body["system"], list)
                    else body["system"]
                )
                reply = fake._policy.complete(
                    system=system, messages=body["messages"], tools=body.get("tools", [])
                )
                payload = {
                    "id": f"msg_fake_{n}",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": reply.content,
                    "stop_reason": reply.stop_reason,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": fake.input_tokens,
                        "output_tokens": fake.output_tokens,
                    },
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

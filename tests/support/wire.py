"""HTTP/1.1 on a raw socket, read byte by byte as a strict client would read it.

Why not ``http.client`` or httpx: both forgive what this is here to catch. A
response whose ``Content-Length`` is 0 while the server meant to send a sentence
looks, to them, like a complete empty answer; the server then drops the
keep-alive connection and the *next* request fails with a reset, blamed on
the wrong request. This client keeps one connection open per caller, frames
every answer by its own headers (``Content-Length``, chunked, or none for HEAD,
204 and 304), and reports:

* a connection the server closed after an answer that did not say
  ``Connection: close`` (the sign of an aborted response), blamed on the
  answer before it;
* fewer body bytes than declared, bytes after the declared body, a body that
  is neither chunked nor length-delimited;
* a reset or a timeout.

Each problem raises ``WireError`` with the request it belongs to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time

# uvicorn closes an idle keep-alive connection after 5 s: a connection idle longer than
# this may have been closed for that reason, which is not an abort.
IDLE_REUSE_SECONDS = 3.0
MAX_HEADER_BYTES = 64 * 1024


class WireError(AssertionError):
    """The server broke HTTP framing or the connection (message names the request)."""


@dataclasses.dataclass
class Answer:
    method: str
    target: str
    status: int
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: bytes
    declared_length: int | None
    chunked: bool

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def event_stream(self) -> bool:
        return self.header("content-type").startswith("text/event-stream")


class Wire:
    """One keep-alive connection to ``127.0.0.1:port``, re-opened when the server says close."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port = port
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = b""
        self._last: str = ""  # the previous request on this connection, for blame
        self._last_at = 0.0

    # --- the connection ------------------------------------------------------------

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock, self._buf, self._last = None, b"", ""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buf, self._last = sock, b"", ""
        return sock

    def _recv(self) -> bytes:
        assert self._sock is not None
        return self._sock.recv(65536)

    def _fill(self, need: int, what: str) -> None:
        while len(self._buf) < need:
            chunk = self._recv()
            if not chunk:
                raise EOFError(what)
            self._buf += chunk

    def _line(self, what: str) -> bytes:
        while b"\r\n" not in self._buf:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise WireError(f"{what}: no end of line in {MAX_HEADER_BYTES} bytes")
            chunk = self._recv()
            if not chunk:
                raise EOFError(what)
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line

    def _take(self, n: int, what: str) -> bytes:
        self._fill(n, what)
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    # --- one exchange --------------------------------------------------------------

    def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        stream_ok: bool = False,
    ) -> Answer:
        """Send one request and read its whole answer.

        An event stream (``text/event-stream``) is read up to its headers when
        ``stream_ok`` (it may never end), and the connection is then closed.
        """
        label = f"{method} {target[:200]!r}"
        reused = self._sock is not None
        if reused and time.monotonic() - self._last_at > IDLE_REUSE_SECONDS:
            self.close()
            reused = False
        sock = self._sock or self._connect()
        head = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{self.port}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        previous = self._last
        try:
            sock.sendall(raw)
            status_line = self._line(label)
        except (EOFError, ConnectionResetError, BrokenPipeError) as exc:
            self.close()
            if reused:
                raise WireError(
                    f"the server dropped the connection after answering {previous} without "
                    f"saying 'Connection: close' (an aborted response); seen at {label} ({exc!r})"
                ) from None
            raise WireError(
                f"{label}: the connection was closed before any answer ({exc!r})"
            ) from None
        except TimeoutError:
            self.close()
            raise WireError(f"{label}: no answer within {self.timeout} s") from None
        try:
            answer = self._read_rest(method, target, label, status_line, stream_ok)
        except EOFError as exc:
            self.close()
            raise WireError(f"{label}: the connection ended inside the answer ({exc})") from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            self.close()
            raise WireError(f"{label}: reset inside the answer ({exc!r})") from None
        except TimeoutError:
            self.close()
            raise WireError(f"{label}: the answer stalled for {self.timeout} s") from None
        self._last, self._last_at = label, time.monotonic()
        if stream_ok and answer.event_stream and method != "HEAD":
            self.close()  # read up to its headers: what follows is the stream itself
        elif answer.header("connection").lower() == "close" or (
            answer.declared_length is None and not answer.chunked
        ):
            self._check_nothing_after(label)
            self.close()
        return answer

    def _read_rest(
        self, method: str, target: str, label: str, status_line: bytes, stream_ok: bool
    ) -> Answer:
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise WireError(f"{label}: not a status line: {status_line[:120]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = self._line(f"{label} headers")
            if not line:
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise WireError(f"{label}: malformed header line {line[:120]!r}")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        declared = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if declared is not None and chunked:
            raise WireError(f"{label}: both Content-Length and chunked")
        length = None
        if declared is not None:
            if not declared.isdigit():
                raise WireError(f"{label}: Content-Length {declared!r}")
            length = int(declared)
        answer = Answer(method, target, status, headers, b"", length, chunked)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return answer
        if stream_ok and answer.event_stream:
            return answer
        if length is not None:
            answer.body = self._take(length, f"{label}: {length} bytes declared")
        elif chunked:
            answer.body = self._chunks(label)
        else:  # delimited by the close alone: allowed by HTTP/1.1, never by us
            body = self._buf
            while chunk := self._recv():
                body += chunk
            self._buf = b""
            answer.body = body
        return answer

    def _chunks(self, label: str) -> bytes:
        body = b""
        while True:
            size_line = self._line(f"{label} chunk size").split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise WireError(f"{label}: bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while self._line(f"{label} trailer"):
                    pass
                return body
            body += self._take(size, f"{label} chunk")
            if self._take(2, f"{label} chunk end") != b"\r\n":
                raise WireError(f"{label}: a chunk longer than its size line")

    def _check_nothing_after(self, label: str) -> None:
        """Before closing: no byte beyond the answer already arrived or is waiting."""
        if self._buf:
            raise WireError(f"{label}: {len(self._buf)} bytes after the declared body")
        if self._sock is None:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            extra = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            if extra:
                raise WireError(f"{label}: bytes after the declared body")

    def finish(self) -> None:
        """Close, after checking the last answer left nothing behind it."""
        if self._sock is not None:
            self._check_nothing_after(self._last or "the last answer")
        self.close()

"""Small HTTP client for an OpenAI-compatible server: JSON calls and streamed completions.

Standard library only (``http.client``): one connection per streamed generation, read by its own
thread, so closing that connection is how a generation is suspended (the server sees the client go
away and stops the request). Every event a stream produces goes to one shared queue with the
engine clock's time of arrival — the per-token timestamps — and wakes whoever waits on it.

Failures are classified for the replica logic: ``transport`` (cannot connect, connection reset, a
stream that ends without a finish reason, a timeout, HTTP 429/5xx: the *replica* is in trouble) and
``request`` (HTTP 4xx other than 429: this *request* is wrong; retrying elsewhere would not help).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.openai_protocol import Chunk, ProtocolError, parse_chunk


class HttpFailure(EngineError):
    """A call that failed; ``transport`` says whether the server (not the request) is at fault."""

    def __init__(self, message: str, transport: bool, status: int = 0) -> None:
        super().__init__(message)
        self.transport = transport
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """``http(s)://host:port[/prefix]`` split once; ``api_key`` from an environment variable."""

    url: str
    scheme: str
    host: str
    port: int
    prefix: str
    api_key: str | None = None

    @classmethod
    def parse(cls, url: str, api_key_env: str | None = None) -> Endpoint:
        if not isinstance(url, str) or not url.strip():
            raise EngineError(f"endpoint must be a URL like http://127.0.0.1:8080, got {url!r}")
        parts = urlsplit(url.strip().rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"endpoint {url!r} is not an http(s)://host:port URL")
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):  # accept the usual OpenAI base_url too
            prefix = prefix[:-3]
        key = None
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise EngineError(f"api_key_env {api_key_env!r}: that environment variable is not set")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(url.strip(), parts.scheme, parts.hostname, port, prefix, key)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def _fail_status(status: int, text: str, what: str) -> HttpFailure:
    transport = status == 429 or status >= 500
    return HttpFailure(f"{what}: HTTP {status}: {text[:300]}", transport=transport, status=status)


def call(
    ep: Endpoint,
    method: str,
    path: str,
    body: dict | None = None,
    *,
    timeout: float = 10.0,
    raw: bool = False,
) -> object:
    """One JSON (or raw text with ``raw``) request; raises :class:`HttpFailure`."""
    conn = ep.connection(timeout)
    what = f"{method} {ep.url}{path}"
    try:
        conn.request(
            method,
            ep.prefix + path,
            body=json.dumps(body) if body is not None else None,
            headers=ep.headers(),
        )
        resp = conn.getresponse()
        data = resp.read(16 << 20).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        raise HttpFailure(f"{what}: {type(exc).__name__}: {exc}", transport=True) from exc
    finally:
        conn.close()
    if resp.status != 200:
        raise _fail_status(resp.status, data, what)
    if raw:
        return data
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise HttpFailure(f"{what}: answer is not JSON: {data[:200]!r}", transport=False) from exc


@dataclass
class StreamEvent:
    """What a stream thread reports: a chunk, its end, or a failure."""

    key: tuple[int, int]  # (gen_id, submission number): events of closed submissions are ignored
    t: float
    chunk: Chunk | None = None
    end: bool = False  # the stream ended ([DONE] or EOF) — normal only after a finish reason
    failure: HttpFailure | None = None


class Stream:
    """One streamed ``POST /v1/completions`` read by a daemon thread (see module docstring).

    ``first_token_timeout`` bounds the wait for the first chunk (queueing + prefill on the server),
    ``stall_timeout`` every later gap; either one passing is a transport failure.
    """

    def __init__(
        self,
        ep: Endpoint,
        kind: str,
        body: dict,
        key: tuple[int, int],
        out: queue.Queue,
        clock: Callable[[], float],
        *,
        connect_timeout: float,
        first_token_timeout: float,
        stall_timeout: float,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.ep, self.kind, self.body, self.key = ep, kind, body, key
        self._out, self._clock, self._wake = out, clock, wake
        self.connect_timeout = connect_timeout
        self.first_token_timeout = first_token_timeout
        self.stall_timeout = stall_timeout
        self.closed = False
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"openai-stream-{key[0]}.{key[1]}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        """Stop reading and drop the connection: the server cancels the request."""
        with self._lock:
            self.closed = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if conn is not None:
            conn.close()

    def _put(self, **kw: object) -> None:
        if self.closed:
            return
        self._out.put(StreamEvent(self.key, self._clock(), **kw))  # type: ignore[arg-type]  # keyword fields of StreamEvent, given by the callers in this module
        if self._wake is not None:
            self._wake()

    def _run(self) -> None:
        what = f"POST {self.ep.url}/v1/completions"
        try:
            conn = self.ep.connection(self.connect_timeout)
            with self._lock:
                if self.closed:
                    return
                self._conn = conn
            conn.connect()
            conn.sock.settimeout(self.first_token_timeout)
            conn.request(
                "POST",
                self.ep.prefix + "/v1/completions",
                body=json.dumps(self.body),
                headers=self.ep.headers(),
            )
            resp = conn.getresponse()
            if resp.status != 200:
                text = resp.read(1 << 16).decode("utf-8", "replace")
                self._put(failure=_fail_status(resp.status, text, what))
                return
            finished = False
            first = True
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    if line.startswith("error:"):  # llama.cpp's SSE error event
                        self._put(failure=HttpFailure(f"{what}: {line[6:].strip()[:300]}", transport=False))
                        return
                    continue
                chunk = parse_chunk(self.kind, line[5:])
                if chunk is None:  # [DONE]
                    break
                if first:
                    first = False
                    conn.sock.settimeout(self.stall_timeout)
                self._put(chunk=chunk)
                if chunk.finish:
                    finished = True
            if not finished:
                self._put(
                    failure=HttpFailure(
                        f"{what}: the stream ended without a finish reason "
                        "(server stopped or dropped the connection)",
                        transport=True,
                    )
                )
            else:
                self._put(end=True)
        except TimeoutError as exc:
            self._put(
                failure=HttpFailure(
                    f"{what}: no data for {exc or 'the timeout'} "
                    f"(first token {self.first_token_timeout:g} s, then "
                    f"{self.stall_timeout:g} s between tokens)",
                    transport=True,
                )
            )
        except ProtocolError as exc:
            self._put(failure=HttpFailure(f"{what}: {exc}", transport=False))
        except Exception as exc:  # noqa: BLE001 - OSError, HTTPException, or http.client racing close()
            if not self.closed:
                self._put(failure=HttpFailure(f"{what}: {type(exc).__name__}: {exc}", transport=True))
        finally:
            with self._lock:
                held = self._conn
                self._conn = None
            if held is not None:
                held.close()

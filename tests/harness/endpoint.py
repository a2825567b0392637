"""A stand-in for the operator's progress endpoint, on loopback: keeps every report posted to
it, in order, and answers 202 as the operator does."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class Endpoint(http.server.ThreadingHTTPServer):
    """Keeps what is posted (``got``), served from a thread of its own until shut down."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        got = self.got

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(202)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

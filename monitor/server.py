"""The monitor's HTTP endpoint: ``/metrics`` (Prometheus text exposition) and
``/status.json`` (the journals and the slowest recent operations, for ``jstall top --url``)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jstall.errors import JstallError


def parse_listen(text):
    """('ADDR', PORT) of 'ADDR:PORT', ':PORT' or 'PORT'."""
    addr, _, port = text.rpartition(":")
    try:
        port = int(port)
        if not 0 <= port < 65536:
            raise ValueError
    except ValueError:
        raise JstallError(f"--listen {text}: not ADDR:PORT (e.g. 127.0.0.1:9853 or :9853)") from None
    return addr.strip("[]") or "0.0.0.0", port


#: seconds a client may take to send its request (or to read the answer) before its
#: connection is dropped: slow or stalled clients never hold a thread for long
CLIENT_TIMEOUT_S = 30.0
#: connections the kernel queues before the server accepts them (a burst of scrapers)
BACKLOG = 256


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = BACKLOG
    daemon_threads = True


class Server:
    """The endpoint, each client in a thread of its own (a scrape answers whatever other
    clients do: tests/test_faults.py holds 200 slow ones open), each dropped after
    ``client_timeout`` seconds without progress."""

    def __init__(self, listen, registry, status, client_timeout=CLIENT_TIMEOUT_S):
        self.registry, self.status = registry, status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = client_timeout

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = generate_latest(outer.registry), CONTENT_TYPE_LATEST
                elif path == "/status.json":
                    body, ctype = json.dumps(outer.status()).encode(), "application/json"
                elif path == "/":
                    body, ctype = b"jstall monitor: /metrics /status.json\n", "text/plain"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        addr, port = listen
        try:
            self.httpd = _HTTPServer((addr, port), Handler)
        except OSError as e:
            raise JstallError(f"--listen {addr}:{port}: {e.strerror}; choose another address or port") from None
        self.httpd.handle_error = self._handle_error
        self.address = self.httpd.server_address
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="jstall-http", daemon=True)

    @staticmethod
    def _handle_error(request, client_address):
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):   # the client went away (a scrape timed out)
            return
        print(f"jstall monitor: HTTP request from {client_address[0]} failed: {exc!r}", file=sys.stderr, flush=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

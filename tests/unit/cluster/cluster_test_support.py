"""What the cluster's end-to-end scripts share: check() recording failures (FAILURES; a script
exits 1 when it is not empty), and loopback HTTP servers that play the API server and the node
exporters."""
import http.server
import socketserver
import sys
import threading
import time

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAILED:", what, file=sys.stderr)


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def serve(handler_fn, protocol_version="HTTP/1.0", hang_s=30):
    """A loopback server answering GET, POST and PATCH with handler_fn(method, path, body) ->
    (status, content_type, body); a status of None hangs the request for hang_s seconds (an
    endpoint that never answers). Returns the port."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def handle_any(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n).decode() if n else ""
            status, ctype, out = handler_fn(method, self.path, body)
            if status is None:
                time.sleep(hang_s)
                return
            data = out.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.handle_any("GET")

        def do_POST(self):
            self.handle_any("POST")

        def do_PATCH(self):
            self.handle_any("PATCH")

        def log_message(self, *args):
            pass

    Handler.protocol_version = protocol_version
    server = ThreadingServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


PROCS = []  # processes a script started; run_script kills those still running


def outcome(name):
    """The script's exit status: 1 with the count when a check failed, else 0."""
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print(f"{name}: all checks passed")
    return 0


def run_script(main):
    """sys.exit(main()), killing every process in PROCS that is still running."""
    try:
        sys.exit(main())
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()

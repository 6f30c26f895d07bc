"""Serve an FTS5 passage index over HTTP in Search-R1's `/retrieve` shape (stdlib only).

    POST /retrieve  {"queries": ["who founded X"], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "p00042", "contents": "\\"Title\\"\\ntext"},
                      "score": 7.1}, ...]]}

With `return_scores: false` each inner list holds the bare documents. This lets several
rollout workers share one retriever, and lets a test point `SearchEnv(retriever_url=...)`
at our own index over loopback. It binds 127.0.0.1 unless told otherwise:

    python -m environments.search_server --port 8000      # the bundled corpus
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from environments.search import MAX_TOP_K, SearchError, open_index, search_index

MAX_REQUEST_BYTES = 1_000_000
MAX_QUERIES = 256


def _retrieve(index: Path, request: Any, default_topk: int) -> dict[str, Any]:
    """The reply to one parsed request body; ValueError names what is wrong with it."""
    if not isinstance(request, dict) or not isinstance(request.get("queries"), list):
        raise ValueError('the body must be a JSON object with a "queries" list')
    queries = request["queries"]
    if len(queries) > MAX_QUERIES or not all(isinstance(q, str) for q in queries):
        raise ValueError(f'"queries" must be a list of at most {MAX_QUERIES} strings')
    topk = request.get("topk")
    topk = default_topk if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOP_K:
        raise ValueError(f'"topk" must be an integer from 1 to {MAX_TOP_K}')
    with_scores = bool(request.get("return_scores", False))
    conn = open_index(index)  # one connection per request: handler threads never share one
    try:
        results: list[list[dict[str, Any]]] = []
        for query in queries:
            try:
                hits = search_index(conn, query, topk)
            except SearchError:
                hits = []  # an empty or garbage query matches nothing
            docs: list[dict[str, Any]] = [
                {"id": h.pid, "contents": f'"{h.title}"\n{h.text}'} for h in hits
            ]
            if with_scores:
                results.append(
                    [{"document": d, "score": h.score} for d, h in zip(docs, hits, strict=True)]
                )
            else:
                results.append(docs)
    finally:
        conn.close()
    return {"result": results}


class _Handler(BaseHTTPRequestHandler):
    server: RetrievalServer

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        if self.path.rstrip("/") != "/retrieve":
            return self._reply(404, {"error": f"unknown path {self.path}; POST /retrieve"})
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_REQUEST_BYTES:
                raise ValueError(f"the body must be 1 to {MAX_REQUEST_BYTES} bytes")
            request = json.loads(self.rfile.read(length))
            reply = _retrieve(self.server.index, request, self.server.default_topk)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError included
            return self._reply(400, {"error": str(e)})
        except Exception as e:  # a broken index: the client gets a reason, not a hang-up
            return self._reply(500, {"error": f"{type(e).__name__}: {e}"})
        self._reply(200, reply)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # quiet: rollout workers call this thousands of times


class RetrievalServer(ThreadingHTTPServer):
    """A threading HTTP server that answers `/retrieve` from one FTS5 index."""

    daemon_threads = True

    def __init__(self, index: Path, host: str, port: int, default_topk: int) -> None:
        super().__init__((host, port), _Handler)
        self.index = index
        """The FTS5 index file every request searches."""
        self.default_topk = default_topk
        """Passages per query when the request names no `topk`."""

    @property
    def url(self) -> str:
        """The `/retrieve` URL to hand to `SearchEnv(retriever_url=...)`."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/retrieve"


def make_retrieval_server(
    index: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    default_topk: int = 3,
) -> RetrievalServer:
    """A bound, not yet serving server (port 0: a free port; see `.url`)."""
    if index is None:
        from tasks.search import index_path

        index = index_path()
    path = Path(index).expanduser().resolve()
    open_index(path).close()  # fail now, with the path in the message, if it is missing
    return RetrievalServer(path, host, port, default_topk)


def serve_index(
    index: str | Path | None = None, host: str = "127.0.0.1", port: int = 0
) -> RetrievalServer:
    """Start serving in a daemon thread and return the server; `.shutdown()` stops it."""
    server = make_retrieval_server(index, host, port)
    threading.Thread(target=server.serve_forever, name="search-server", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--index", help="FTS5 index file (default: the bundled corpus)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3, help="passages when a request names none")
    args = parser.parse_args(argv)
    server = make_retrieval_server(args.index, args.host, args.port, args.topk)
    print(f"serving {server.index} at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

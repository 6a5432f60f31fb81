"""A local HTTP server standing in for the Hugging Face Hub (HF_ENDPOINT) and for a plain
URL host (torch.hub's load_state_dict_from_url), for the tests of compute nodes without
internet (docs/offline.md). It serves files from a folder, answers what the real
huggingface_hub client asks of a file (HEAD then GET of /{repo}/resolve/{revision}/{name},
with the commit and ETag headers), and counts the requests it got."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0" * 40


class Hub:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: Counter[str] = Counter()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                hub.requests[f"{self.command} {self.path}"] += 1
                path = hub.file_of(self.path.split("?")[0])
                if path is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.end_headers()
                    return
                data = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def file_of(self, path: str) -> Path | None:
        """/{org}/{repo}/resolve/{revision}/{name} (the Hub) or /files/{name} (a URL)."""
        parts = path.strip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            found = self.root / parts[0] / parts[1] / "/".join(parts[4:])
        elif parts[:1] == ["files"]:
            found = self.root / "files" / "/".join(parts[1:])
        else:
            return None
        return found if found.is_file() else None

    def stop(self) -> None:
        self.server.shutdown()


# A user's model: weights from the Hub, bias from a URL (what models often do).
HUBNET = '''
import torch
from torch import nn
from huggingface_hub import hf_hub_download


class Net(nn.Module):
    """Weights from the Hub, bias from a URL: what a user's model often does."""

    def __init__(self, bias_url: str) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 8)
        weights = torch.load(hf_hub_download("acme/tiny", "weights.pt"), weights_only=True)
        bias = torch.hub.load_state_dict_from_url(bias_url, weights_only=True)
        with torch.no_grad():
            self.lin.weight.copy_(weights["w"] * 0.01)
            self.lin.bias.copy_(bias["b"])

    def forward(self, x):
        return self.lin(x)
'''


def hub_files(root: Path) -> Path:
    """What the Hub and the URL host serve: the model's weights (acme/tiny), its bias and a
    vocabulary file."""
    import torch

    (root / "acme" / "tiny").mkdir(parents=True)
    (root / "files").mkdir()
    torch.save({"w": torch.ones(8, 32)}, root / "acme" / "tiny" / "weights.pt")
    torch.save({"b": torch.zeros(8)}, root / "files" / "bias.pt")
    (root / "files" / "vocab.txt").write_text("a b c\n")
    return root

"""Watch this process's network accesses (offline/child.py installs it first thing).

The socket module's name lookup and connect are wrapped: an access that fails (the
network namespace has none) or that the guard refuses (no namespace on this machine) is
written as one JSON line to the trace file, with the stack as network_rules.Frame rows,
so the report names the library and the user's line that led there. In "watch" mode (the
network on: prefetch) every access outside this machine is written and goes through.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import sysconfig
from pathlib import Path
from types import FrameType
from typing import Any

from jeanzay_kit.offline.network_rules import LIBRARY, PROJECT, STDLIB, TOOLKIT

OFFLINE, GUARD, WATCH = "offline", "guard", "watch"
_TOOLKIT_DIR = str(Path(__file__).resolve().parents[1])
_STDLIB_DIR = sysconfig.get_paths()["stdlib"]
# A frame's locals that may hold the URL being fetched (requests, urllib3, httpx/httpcore,
# urllib, torch.hub): read where known, as text.
_URL_NAMES = ("url", "full_url", "fullurl", "request")


def _where(file: str, project: str) -> str:
    if file.startswith(_TOOLKIT_DIR):
        return TOOLKIT
    if "site-packages" in file or "dist-packages" in file:
        return LIBRARY
    if file.startswith(_STDLIB_DIR) or file.startswith("<frozen"):
        return STDLIB
    return PROJECT if file.startswith(project) else LIBRARY


def _url_in(frame: FrameType) -> str | None:
    for name in _URL_NAMES:
        value = frame.f_locals.get(name)
        value = getattr(value, "url", value)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        text = str(value) if value is not None else ""
        if text.startswith(("http://", "https://", "ftp://")):
            return text
    return None


class Tracer:
    def __init__(self, path: Path, mode: str, project: str) -> None:
        self.path, self.mode, self.project = path, mode, project.rstrip("/") + "/"
        self.names: dict[str, str] = {}  # address -> the name it was looked up by

    def record(self, host: str, port: int | None) -> None:
        frame: FrameType | None = sys._getframe(2)
        rows: list[list[Any]] = []
        url = None
        while frame is not None:
            file = frame.f_code.co_filename
            module = str(frame.f_globals.get("__name__", ""))
            where = _where(file, self.project)
            shown = file[len(self.project) :] if where == PROJECT else file
            rows.append([shown, frame.f_lineno, module, where])
            url = url or _url_in(frame)
            frame = frame.f_back
        rows.reverse()  # outermost first
        line = {"host": self.names.get(host, host), "port": port, "url": url, "frames": rows}
        with self.path.open("a") as out:  # one line a write: a child killed keeps the rest
            out.write(json.dumps(line) + "\n")

    def lookup(self, real: Any, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if self.mode == GUARD and not _local(name):
            self.record(name, _port(port))
            raise socket.gaierror(socket.EAI_NONAME, "jzk: no network (guard)")
        try:
            found = real(host, port, *args, **kwargs)
        except OSError:
            self.record(name, _port(port))
            raise
        for *_, address in found:
            self.names.setdefault(str(address[0]), name)
        if self.mode == WATCH and not _local(name):
            self.record(name, _port(port))
        return found

    def connect(self, real: Any, sock: socket.socket, address: Any) -> Any:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return real(sock, address)  # a Unix socket: this machine
        host, port = str(address[0]), _port(address[1])
        if self.mode == GUARD and not _local(host):
            self.record(host, port)
            raise OSError(101, "jzk: network is unreachable (guard)")
        try:
            return real(sock, address)
        except BlockingIOError:
            raise  # a non-blocking connect under way: not a failure
        except OSError:
            self.record(host, port)
            raise


def _port(port: Any) -> int | None:
    try:
        return int(port)
    except (TypeError, ValueError):
        return None


def _local(host: str) -> bool:
    if host in ("localhost", "") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def install(path: Path, mode: str, project: str) -> Tracer:
    tracer = Tracer(path, mode, project)
    real_lookup, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return tracer.lookup(real_lookup, host, port, *args, **kwargs)

    def connect(sock: socket.socket, address: Any) -> Any:
        return tracer.connect(real_connect, sock, address)

    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    return tracer


def loopback_up() -> None:
    """A new network namespace starts with its loopback down: up, as on a compute node
    (a process group's rendezvous on 127.0.0.1 works; nothing else is reachable)."""
    import fcntl
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), siocgifflags, request))[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))

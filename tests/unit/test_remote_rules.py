"""Laptop mode's pure rules (jeanzay_kit/remote/): ssh command lines and the login-node
shell line (run for real in bash, against a fake work folder), the code archive both
ends, the laptop's registry of hosts and runs, and the sweep/set-up helpers of laptop.py.
No network, no ssh: temp folders only."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.errors import JzkError, SpecError
from jeanzay_kit.remote import registry
from jeanzay_kit.remote.code_archive import (
    code_key,
    pack,
    project_name,
    received_key,
    unpack,
)
from jeanzay_kit.remote.laptop import setup_lines, sweep_argv
from jeanzay_kit.remote.ssh_rules import (
    MAX_SOCKET_DIR,
    NOT_SET_UP,
    PERSIST,
    Host,
    control_dir,
    module_lines,
    parse_host,
    remote_line,
    ssh_argv,
    ssh_failure,
)

RECEIVED = ".jzk-received.json"

# -- ssh_rules: parse_host ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "port", "label"),
    [
        ("jean-zay", "jean-zay", None, "jean-zay"),
        ("  jean-zay  ", "jean-zay", None, "jean-zay"),
        ("me@jean-zay.idris.fr", "me@jean-zay.idris.fr", None, "me@jean-zay.idris.fr"),
        ("me@host:2222", "me@host", 2222, "me@host:2222"),
        ("host:22", "host", 22, "host:22"),
    ],
)
def test_parse_host(text: str, name: str, port: int | None, label: str) -> None:
    host = parse_host(text)
    assert host == Host(name, port)
    assert host.label == label


@pytest.mark.parametrize(
    "text", ["", "   ", "-oProxyCommand=x", "me@host extra", "a\tb", ":2222", "host:", "::1"]
)
def test_parse_host_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a host"):
        parse_host(text)


# -- ssh_rules: ssh_argv ----------------------------------------------------------------


def _options(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]


@pytest.mark.parametrize(
    ("host", "config", "batch"),
    [
        (Host("jean-zay"), None, True),
        (Host("me@host", 2222), None, True),
        (Host("me@host", 2222), "/tmp/cfg", False),
        (Host("jz"), "/etc/ssh/alt", True),
    ],
)
def test_ssh_argv(host: Host, config: str | None, batch: bool) -> None:
    argv = ssh_argv(host, "/s/ssh/%C", config, batch=batch)
    opts = _options(argv)
    assert argv[0] == "ssh" and argv[-1] == host.name
    assert "ControlPath=/s/ssh/%C" in opts
    assert "ControlMaster=auto" in opts
    assert f"ControlPersist={PERSIST}" in opts
    assert "ClearAllForwardings=yes" in opts
    assert any(o.startswith("ConnectTimeout=") for o in opts)
    assert ("BatchMode=yes" in opts) is batch
    if config:
        assert argv[argv.index("-F") + 1] == config
    else:
        assert "-F" not in argv
    if host.port is None:
        assert "-p" not in argv
    else:
        assert argv[argv.index("-p") + 1] == str(host.port)
    assert argv.count(host.name) == 1  # the host once, last


# -- ssh_rules: control_dir ---------------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    ["/home/me/.local/state/jzk", "/home/me/.local/state/jzk/", "/" + "s" * 44],
)
def test_control_dir_short_state(state: str) -> None:
    got = control_dir(state, 1000)
    assert got == state.rstrip("/") + "/ssh"
    assert len(got) <= MAX_SOCKET_DIR
    assert len(got) + len("/" + "f" * 40 + "." + "r" * 16) <= 107  # OpenSSH's temporary name


@pytest.mark.parametrize(
    ("state", "uid"),
    [("/" + "s" * 45, 1000), ("/very/long/" + "x" * 200, 4294967294), ("/a" * 40, 0)],
)
def test_control_dir_long_state(state: str, uid: int) -> None:
    got = control_dir(state, uid)
    assert re.fullmatch(rf"/tmp/jzk-ssh-{uid}-[0-9a-f]{{8}}", got)
    assert len(got) <= MAX_SOCKET_DIR
    assert control_dir(state, uid) == got  # stable
    assert control_dir(state + "x", uid) != got


# -- ssh_rules: remote_line, run in bash ---------------------------------------------------

# Prints its cwd, then each argument, NUL-separated (an argument may hold a newline).
_FAKE = '#!/bin/sh\nprintf \'%s\\0\' "$(pwd)" "$0" "$@"\n'


def _fake_work(folder: Path, programs: tuple[str, ...] = ("jzk", "python")) -> Path:
    bin_dir = folder / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for program in programs:
        (bin_dir / program).write_text(_FAKE)
        (bin_dir / program).chmod(0o755)
    return folder


def _bash(line: str, home: Path, work: Path) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "WORK": str(work)}
    return subprocess.run(["bash", "-c", line], env=env, cwd=home, capture_output=True, timeout=10)


_ODD_ARGS = [
    "submit",
    "name=my run",
    "it's",
    'say "hi"',
    "a;b",
    "$(touch /tmp/jzk-should-not-exist)",
    "`id`",
    "$HOME",
    "*",
    "two\nlines",
    "",
]


@pytest.mark.parametrize(
    ("workdir", "where"),
    [("$WORK/jzk", "work/jzk"), ("~/jzk", "home/jzk"), ("~", "home"), ("{tmp}/abs", "abs")],
)
def test_remote_line_runs_in_bash(tmp_path: Path, workdir: str, where: str) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    root = tmp_path / where
    _fake_work(root)
    line = remote_line([], workdir.format(tmp=tmp_path), _ODD_ARGS, "projects/p 1")
    out = _bash(line, home, work)
    assert out.returncode == 0, out.stderr
    cwd, program, *args = out.stdout.decode().split("\0")[:-1]
    assert Path(cwd) == root / "projects" / "p 1"
    assert program == str(root / "venv" / "bin" / "jzk")
    assert args == _ODD_ARGS  # each word one literal argument
    assert not Path("/tmp/jzk-should-not-exist").exists()


def test_remote_line_program_and_no_cwd(tmp_path: Path) -> None:
    work = _fake_work(tmp_path / "w")
    line = remote_line([], str(work), ["train.py", "-m", "lr=1,2"], program="python")
    out = _bash(line, tmp_path, tmp_path)
    cwd, program, *args = out.stdout.decode().split("\0")[:-1]
    assert out.returncode == 0
    assert program.endswith("/venv/bin/python")
    assert args == ["train.py", "-m", "lr=1,2"]
    assert Path(cwd) == tmp_path  # no cwd: where the login shell starts (here: HOME)


def test_remote_line_setup_lines_run_first(tmp_path: Path) -> None:
    work = tmp_path / "w"
    bin_dir = work / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "jzk").write_text('#!/bin/sh\necho "setup=$FROM_SETUP remote=$JZK_REMOTE"\n')
    (bin_dir / "jzk").chmod(0o755)
    line = remote_line(["export FROM_SETUP=yes"], str(work), ["x"])
    out = _bash(line, tmp_path, tmp_path)
    assert out.stdout.decode().strip() == f"setup=yes remote={work}"


@pytest.mark.parametrize("programs", [(), ("python",)])
def test_remote_line_not_set_up(tmp_path: Path, programs: tuple[str, ...]) -> None:
    work = tmp_path / "w"
    work.mkdir()
    if programs:
        _fake_work(work, programs)  # a python but no jzk: still not set up
    out = _bash(remote_line([], str(work), ["status"], "projects/p"), tmp_path, tmp_path)
    assert out.returncode == Exit.NOT_SET_UP
    assert out.stdout.decode().strip() == NOT_SET_UP
    assert not (work / "projects").exists()  # stopped before the cwd is made


# -- ssh_rules: module_lines ------------------------------------------------------------


@pytest.mark.parametrize(
    ("purge", "modules", "pytorch", "expected"),
    [
        (False, [], None, []),
        (True, [], None, ["module purge"]),
        (False, ["arch/h100"], None, ["module load arch/h100"]),
        (
            True,
            ["arch/h100", "cuda/12.1"],
            "pytorch-gpu/py3/2.3.0",
            ["module purge", "module load arch/h100 cuda/12.1 pytorch-gpu/py3/2.3.0"],
        ),
        (False, [], "pytorch-gpu/py3/2.3.0", ["module load pytorch-gpu/py3/2.3.0"]),
        (False, ["a b;c"], None, ["module load 'a b;c'"]),
    ],
)
def test_module_lines(
    purge: bool, modules: list[str], pytorch: str | None, expected: list[str]
) -> None:
    assert module_lines(purge, modules, pytorch) == expected


# -- ssh_rules: ssh_failure --------------------------------------------------------------


@pytest.mark.parametrize(
    ("stderr", "advice"),
    [
        ("ssh: connect to host jz.example port 22: Connection refused\n", "refuses the connection"),
        ("ssh: connect to host jz.example port 22: Connection timed out\n", "does not answer"),
        ("ssh: connect to host 10.0.0.1 port 22: No route to host\r\n", "does not answer"),
        (
            "ssh: Could not resolve hostname jz.example: Name or service not known\n",
            "not a known host name",
        ),
        ("me@jz.example: Permission denied (publickey).\n", "refused the login"),
        (
            "@@@@@@@@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
            "Host key for jz.example has changed.\nHost key verification failed.\n",
            "host key is not the one known",
        ),
        ("Connection to jz.example closed by remote host.\n", "was lost"),
        ("client_loop: send disconnect: Broken pipe\n", "was lost"),
        ("Read from remote host jz.example: Connection reset by peer\n", "was lost"),
        ("some new ssh error\n", "ssh to jz failed"),
        ("", "no message"),
    ],
)
def test_ssh_failure(stderr: str, advice: str) -> None:
    said = ssh_failure("jz", 255, stderr)
    assert said is not None
    assert "jz" in said and advice in said
    assert "\n" not in said and "\r" not in said
    last = [line.strip() for line in stderr.splitlines() if line.strip()]
    if last:
        assert f"({last[-1]})" in said  # quotes what ssh said last


@pytest.mark.parametrize("code", [0, 1, 2, 97, 254])
def test_ssh_failure_command_ran(code: int) -> None:
    assert ssh_failure("jz", code, "Permission denied (publickey).") is None


# -- code_archive ---------------------------------------------------------------------


def _project(root: Path, files: dict[str, str | bytes]) -> list[str]:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return list(files)


_CODE = {"train.py": "print('hi')\n", "pkg/mod.py": "X = 1\n", "run.sh": "#!/bin/sh\necho\n"}


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gzip.time, "time", lambda: 1_700_000_000.0)


def test_pack_is_reproducible(tmp_path: Path, frozen_clock: None) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    names = _project(a, _CODE)
    _project(b, _CODE)
    first, again = pack(a, names), pack(b, list(reversed(names)))
    assert (first.key, first.data) == (again.key, again.data)
    assert first.key == code_key(a, names) and re.fullmatch(r"[0-9a-f]{16}", first.key)
    assert first.files == 3 and first.bytes == sum(len(v) for v in _CODE.values())
    with tarfile.open(fileobj=io.BytesIO(first.data), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(names)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}


def test_pack_same_bytes_at_another_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = _project(tmp_path, _CODE)
    monkeypatch.setattr(gzip.time, "time", lambda: 1_700_000_000.0)
    first = pack(tmp_path, names)
    monkeypatch.setattr(gzip.time, "time", lambda: 1_700_000_100.0)
    assert pack(tmp_path, names).data == first.data


@pytest.mark.parametrize(
    "change",
    [
        {"train.py": "print('hj')\n"},  # one byte
        {"pkg/mod.py": "X = 1\n\n"},  # one byte more
    ],
)
def test_pack_key_follows_content(tmp_path: Path, change: dict[str, str]) -> None:
    names = _project(tmp_path, _CODE)
    before = pack(tmp_path, names).key
    _project(tmp_path, change)
    assert pack(tmp_path, names).key != before


def test_pack_key_follows_names(tmp_path: Path) -> None:
    names = _project(tmp_path, _CODE)
    before = pack(tmp_path, names).key
    (tmp_path / "renamed.py").write_text(_CODE["train.py"])
    assert pack(tmp_path, ["renamed.py", "pkg/mod.py", "run.sh"]).key != before


def test_pack_keeps_modes(tmp_path: Path) -> None:
    names = _project(tmp_path, _CODE)
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "train.py").chmod(0o600)
    with tarfile.open(fileobj=io.BytesIO(pack(tmp_path, names).data), mode="r:gz") as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert modes == {"run.sh": 0o755, "train.py": 0o644, "pkg/mod.py": 0o644}


@pytest.mark.parametrize("folder", ["app", "my proj!", "été", "a.b_c-d"])
def test_project_name(tmp_path: Path, folder: str) -> None:
    one, two = tmp_path / "x" / folder, tmp_path / "y" / folder
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    name = project_name(one)
    assert name == project_name(one) == project_name(tmp_path / "x" / "." / folder)
    # Letters (str.isalnum: also non-ASCII ones), digits and ._- only: no space, no /.
    assert re.fullmatch(r"[\w.-]+-[0-9a-f]{6}", name)
    assert name != project_name(two)
    assert name.rsplit("-", 1)[0] == project_name(two).rsplit("-", 1)[0]


def _received(project: Path) -> dict[str, object]:
    return json.loads((project / RECEIVED).read_text())


def test_unpack_then_sync(tmp_path: Path) -> None:
    src, project, archives = tmp_path / "src", tmp_path / "there" / "p", tmp_path / "arch"
    names = _project(src, _CODE)
    (src / "run.sh").chmod(0o755)
    first = pack(src, names)
    assert unpack(project, first.key, io.BytesIO(first.data), archives) == 3
    for name, content in _CODE.items():
        assert (project / name).read_text() == content
    assert os.access(project / "run.sh", os.X_OK)
    assert received_key(project) == first.key
    assert _received(project) == {"key": first.key, "files": sorted(names)}
    assert (archives / f"{first.key}.tar.gz").read_bytes() == first.data

    _project(project, {"outputs/result.txt": "kept"})
    (src / "pkg" / "mod.py").unlink()
    second = pack(src, ["train.py", "run.sh"])
    assert unpack(project, second.key, io.BytesIO(second.data), archives) == 2
    assert not (project / "pkg" / "mod.py").exists()
    assert (project / "train.py").exists()
    assert (project / "outputs" / "result.txt").read_text() == "kept"
    assert _received(project) == {"key": second.key, "files": ["run.sh", "train.py"]}
    assert (archives / f"{first.key}.tar.gz").exists()  # kept for replays
    assert not list(archives.glob("*.tmp")) and not list(archives.glob(".*.tmp"))


def _broken(data: bytes) -> list[bytes]:
    return [b"", b"not a gzip stream at all", data[: len(data) // 2], data[:20]]


@pytest.mark.parametrize("which", range(4))
def test_unpack_broken_stream(tmp_path: Path, which: int) -> None:
    src, project, archives = tmp_path / "src", tmp_path / "p", tmp_path / "arch"
    names = _project(src, {**_CODE, "big.bin": random.Random(1).randbytes(50_000)})
    good = pack(src, names)
    unpack(project, good.key, io.BytesIO(good.data), archives)
    before = (project / RECEIVED).read_bytes()
    _project(src, {"train.py": "changed\n"})
    bad = _broken(pack(src, names).data)[which]
    with pytest.raises(JzkError, match="arrived broken") as err:
        unpack(project, "feedfacefeedface", io.BytesIO(bad), archives)
    assert "\n" not in str(err.value)
    assert (project / RECEIVED).read_bytes() == before
    assert (project / "train.py").read_text() == _CODE["train.py"]
    assert sorted(p.name for p in archives.iterdir()) == [f"{good.key}.tar.gz"]


def test_unpack_refuses_corrupted_content(tmp_path: Path) -> None:
    src = tmp_path / "src"
    rng = random.Random(0)
    code = {f"m{i}.py": "\n".join(f"x{rng.random()} = {j}" for j in range(300)) for i in range(5)}
    names = _project(src, code)
    good = pack(src, names)
    accepted_wrong = 0
    for n, pos in enumerate(range(40, len(good.data) - 40, len(good.data) // 15)):
        bad = good.data[:pos] + bytes([good.data[pos] ^ 0x10]) + good.data[pos + 1 :]
        project = tmp_path / f"p{n}"
        try:
            unpack(project, good.key, io.BytesIO(bad), tmp_path / f"a{n}")
        except Exception:  # refused (a JzkError is right; any exception counts here)
            continue
        if not all((project / x).is_file() for x in names) or code_key(project, names) != good.key:
            accepted_wrong += 1
    assert accepted_wrong == 0


@pytest.mark.parametrize("evil", ["../evil.py", "/etc/evil.py", "pkg/../../evil.py"])
def test_unpack_refuses_paths_outside(tmp_path: Path, evil: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("ok.py", evil):
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"x=1"))
    project = tmp_path / "deep" / "p"
    with pytest.raises(JzkError, match="refused"):
        unpack(project, "0123456789abcdef", io.BytesIO(buf.getvalue()), tmp_path / "arch")
    assert not (tmp_path / "deep" / "evil.py").exists()
    assert not (tmp_path / "evil.py").exists()
    assert not (project / "ok.py").exists()


def test_unpack_refuses_a_link(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("link.py")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(JzkError, match="refused"):
        unpack(tmp_path / "p", "0123456789abcdef", io.BytesIO(buf.getvalue()), tmp_path / "a")
    assert not (tmp_path / "p" / "link.py").is_symlink()


# -- registry -------------------------------------------------------------------------


def _run(host: str, run_dir: str, jobs: list[str], name: str | None = None) -> registry.RemoteRun:
    return registry.RemoteRun(
        host=host, name=name or Path(run_dir).name, run_dir=run_dir, project="projects/p", jobs=jobs
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state" / "jzk"  # not there yet: the registry makes it


def test_remote_runs_empty(state: Path) -> None:
    assert registry.remote_runs(state) == []
    assert registry.find_run(state, "anything") is None


def test_record_and_merge(state: Path) -> None:
    registry.record_run(state, _run("jz", "/w/runs/a", ["11"]))
    registry.record_run(state, _run("jz", "/w/runs/b", ["20"]))
    with registry.runs_file(state).open("a") as out:
        out.write('{"host": "jz", "name": "half\n')  # a line cut short
        out.write('{"host": "jz"}\n')  # another version's line
        out.write("[1, 2]\n")
    registry.record_run(state, _run("jz", "/w/runs/a", ["12", "11", "13"]))
    registry.record_run(state, _run("other", "/w/runs/a", ["99"]))
    runs = registry.remote_runs(state)
    assert [(r.host, r.run_dir, list(r.jobs)) for r in runs] == [
        ("jz", "/w/runs/b", ["20"]),
        ("jz", "/w/runs/a", ["11", "12", "13"]),
        ("other", "/w/runs/a", ["99"]),
    ]


@pytest.mark.parametrize(
    ("target", "found"),
    [
        ("alpha", "/w/runs/alpha"),
        ("/w/runs/alpha", "/w/runs/alpha"),
        ("/w/runs/beta/", "/w/runs/beta/"),
        ("/w/runs/beta", "/w/runs/beta/"),
        ("101", "/w/runs/alpha"),
        ("202", "/w/runs/alpha"),
        ("301", "/w/runs/beta/"),
        ("nothing", None),
        ("10", None),  # not a prefix match
    ],
)
def test_find_run(state: Path, target: str, found: str | None) -> None:
    registry.record_run(state, _run("jz", "/w/runs/alpha", ["101"]))
    registry.record_run(state, _run("jz", "/w/runs/beta/", ["301"], name="beta"))
    registry.record_run(state, _run("jz", "/w/runs/alpha", ["202"]))
    run = registry.find_run(state, target)
    assert (run.run_dir if run else None) == found


def test_find_run_target_with_trailing_slash(state: Path) -> None:
    registry.record_run(state, _run("jz", "/w/runs/alpha", ["101"]))
    assert registry.find_run(state, "/w/runs/alpha/") is not None


@pytest.mark.parametrize("target", ["same", "555"])
def test_find_run_ambiguous(state: Path, target: str) -> None:
    registry.record_run(state, _run("jz", "/w/runs/same", ["555"]))
    registry.record_run(state, _run("other:2222", "/scratch/runs/same", ["555"]))
    with pytest.raises(JzkError) as err:
        registry.find_run(state, target)
    said = str(err.value)
    assert "jz:/w/runs/same" in said and "other:2222:/scratch/runs/same" in said
    assert "2 remote runs" in said and "\n" not in said


def test_hosts(state: Path) -> None:
    with pytest.raises(JzkError, match="jzk remote setup jz"):
        registry.host_settings(state, "jz")
    registry.save_host(state, "jz", "$WORK/jzk", ["module load x"])
    registry.save_host(state, "me@h:2222", "~/jzk", [])
    registry.save_host(state, "jz", "$SCRATCH/jzk", ["module purge", "module load y"])
    assert registry.host_settings(state, "jz") == (
        "$SCRATCH/jzk",
        ["module purge", "module load y"],
    )
    assert registry.host_settings(state, "me@h:2222") == ("~/jzk", [])
    assert [p.name for p in state.iterdir()] == ["hosts.json"]  # no .tmp left
    with pytest.raises(JzkError, match="jzk remote setup unknown"):
        registry.host_settings(state, "unknown")


@pytest.mark.parametrize("content", ["not json", "[1, 2]", ""])
def test_hosts_unreadable(state: Path, content: str) -> None:
    state.mkdir(parents=True)
    registry.hosts_file(state).write_text(content)
    with pytest.raises(JzkError, match="jzk remote setup jz"):
        registry.host_settings(state, "jz")
    registry.save_host(state, "jz", "~/jzk", [])
    assert registry.host_settings(state, "jz") == ("~/jzk", [])


# -- laptop: sweep_argv ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("rest", "kept"),
    [
        (["-m", "lr=1,2", "hydra.launcher.on=jz"], ["-m", "lr=1,2"]),
        (["+hydra.launcher.on=jz", "-m"], ["-m"]),
        (["~hydra.launcher.on"], ["~hydra.launcher.on"]),  # no '=': not the option's value
        (["hydra.sweep.dir=/home/me/multirun/x", "a=1"], ["a=1"]),
        (["++hydra.sweep.dir=/home/me/multirun/x", "a=1"], ["a=1"]),
        (["hydra.sweep.dir=multirun/x", "a=1"], ["hydra.sweep.dir=multirun/x", "a=1"]),
        (["hydra.launcher.one=1"], ["hydra.launcher.one=1"]),
        ([], []),
    ],
)
@pytest.mark.parametrize("script", ["train.py", "src/train.py"])
def test_sweep_argv_script(tmp_path: Path, rest: list[str], kept: list[str], script: str) -> None:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    assert sweep_argv([str(root / script), *rest], root) == ("python", [script, *kept])


def test_sweep_argv_relative_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "exp").mkdir()
    monkeypatch.chdir(tmp_path / "exp")
    assert sweep_argv(["run.py", "-m", "hydra.launcher.on=jz"], tmp_path) == (
        "python",
        ["exp/run.py", "-m"],
    )


@pytest.mark.parametrize("jzk", ["/home/me/.venv/bin/jzk", "jzk"])
def test_sweep_argv_jzk(tmp_path: Path, jzk: str) -> None:
    argv = [jzk, "submit", "-m", "a=1,2", "hydra.launcher.on=jz", "hydra.sweep.dir=/abs"]
    assert sweep_argv(argv, tmp_path) == ("jzk", ["submit", "-m", "a=1,2"])


def test_sweep_argv_script_outside(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    with pytest.raises(JzkError, match="is not in the project") as err:
        sweep_argv([str(tmp_path / "elsewhere" / "train.py"), "-m"], tmp_path / "proj")
    assert "\n" not in str(err.value)


# -- laptop: setup_lines (from a real JobSpec) ------------------------------------------

_H100 = ["cluster=jeanzay_h100", "cluster.account=abc@h100"]
_GUARD = "if command -v module >/dev/null 2>&1; then "


def _spec(*more: str):  # noqa: ANN202 - a JobSpec
    from jeanzay_kit.launch.request import spec_of

    return spec_of([*_H100, *more], None)


def test_setup_lines_guard_modules() -> None:
    spec = _spec()
    lines = setup_lines(spec)
    c = spec.cluster
    modules = module_lines(c.module_purge, c.modules, c.pytorch_module)
    assert modules  # the H100 profile loads modules
    assert lines[: len(modules)] == [f"{_GUARD}{m}; fi" for m in modules]
    assert lines[len(modules) :] == list(c.remote_setup)


def test_setup_lines_then_remote_setup() -> None:
    spec = _spec(
        "cluster.pytorch_module=pytorch-gpu/py3/2.3.0",
        "cluster.remote.setup=['export A=1','source $WORK/env.sh']",
    )
    lines = setup_lines(spec)
    assert lines[-2:] == ["export A=1", "source $WORK/env.sh"]
    guarded = lines[:-2]
    assert guarded and all(line.startswith(_GUARD) and line.endswith("; fi") for line in guarded)
    assert "pytorch-gpu/py3/2.3.0" in guarded[-1]


@pytest.mark.parametrize("value", ["'a b'", "'a;b'", "'$WORK/x y'"])
def test_remote_workdir_refused(value: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(f"cluster.remote.workdir={value}")
    said = str(err.value)
    assert "cluster.remote.workdir" in said and "\n" not in said


@pytest.mark.parametrize("value", ["$WORK/jzk", "~/jzk", "/lustre/me/jzk"])
def test_remote_workdir_accepted(value: str) -> None:
    assert _spec(f"cluster.remote.workdir='{value}'").cluster.remote_workdir == value

"""``distlock elect`` and ``distlock leader`` as real subprocesses on SQLite: CMD runs only while leader (with
DISTLOCK_TERM), a lost leadership stops it (exit 70), candidates queue, ``--listen`` prints every change."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import distlock
from tests.test_run import PY, cli, distlock_cmd, pid_alive


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def test_elect_runs_the_command_while_leader_with_its_term(tmp_path: Path) -> None:
    url = _url(tmp_path)
    out = cli(
        url, "elect", "svc", "host-a:80", "--", "sh", "-c", 'echo "$DISTLOCK_NAME $DISTLOCK_TERM $DISTLOCK_VALUE"'
    )
    assert out.returncode == 0, out.stderr
    name, term, value = out.stdout.split()
    assert (name, value) == ("svc", "host-a:80") and int(term) > 0
    assert cli(url, "leader", "svc").stdout.strip() == "-"  # resigned when CMD ended
    assert cli(url, "elect", "svc", "v", "--", "sh", "-c", "exit 7").returncode == 7


def test_a_second_candidate_waits_and_leader_prints_the_first(tmp_path: Path) -> None:
    url = _url(tmp_path)
    with subprocess.Popen(distlock_cmd(url, "elect", "svc", "A"), stdout=subprocess.PIPE, text=True) as first:
        _leads_then_resigns(url, first)
    assert cli(url, "leader", "svc").returncode == 1


def _leads_then_resigns(url: str, first: subprocess.Popen[str]) -> None:
    assert first.stdout is not None
    name, term = first.stdout.readline().split()
    assert name == "svc"
    try:
        shown = cli(url, "leader", "svc")
        assert shown.returncode == 0 and shown.stdout.strip() == f"{term} A"
        info = json.loads(cli(url, "leader", "--json", "svc").stdout)
        assert info["value"] == "A" and info["term"] == int(term) and info["owner"]
        blocked = cli(url, "elect", "-w", "0.5", "-E", "9", "svc", "B", "--", "true")
        assert blocked.returncode == 9 and "not leader" in blocked.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0  # resigned on SIGTERM


def test_lost_leadership_stops_the_command_and_exits_70(tmp_path: Path) -> None:
    url = _url(tmp_path)
    pidfile = tmp_path / "pid"
    child = f"import os,time\nopen({str(pidfile)!r},'w').write(str(os.getpid()))\nprint('up', flush=True)\ntime.sleep(120)\n"
    with subprocess.Popen(
        distlock_cmd(url, "elect", "--ttl", "2", "svc", "A", PY, "-c", child),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        pid = int(pidfile.read_text())
        with distlock.connect(url) as store:
            assert store.break_lock("svc")
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 70 and "leadership" in err and "lost" in err, err
    alive = pid_alive(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive


def test_listen_prints_every_leader_change(tmp_path: Path) -> None:
    url = _url(tmp_path)
    with subprocess.Popen(
        distlock_cmd(url, "elect", "--listen", "--json", "-w", "20", "svc"), stdout=subprocess.PIPE, text=True
    ) as listener:
        _listens(url, listener)
    started = time.monotonic()
    plain = cli(url, "elect", "--listen", "-w", "0.5", "svc")
    assert plain.stdout.strip() == "-" and time.monotonic() - started < 30


def _listens(url: str, listener: subprocess.Popen[str]) -> None:
    assert listener.stdout is not None
    assert json.loads(listener.stdout.readline())["value"] is None
    with distlock.connect(url) as store:
        el = store.election("svc", ttl=10)
        assert el.campaign("first", timeout=5)
        got = json.loads(listener.stdout.readline())
        assert (got["value"], got["term"]) == ("first", el.term)
        el.proclaim("second")
        got = json.loads(listener.stdout.readline())
        assert (got["value"], got["term"]) == ("second", el.term)
        el.resign()
        assert json.loads(listener.stdout.readline())["value"] is None
    listener.send_signal(signal.SIGINT)
    assert listener.wait(timeout=30) == 0


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    url = _url(tmp_path)
    for args in (["elect", "svc"], ["elect", "--listen", "svc", "extra"], ["elect", "--ttl", "0", "svc", "v"]):
        out = cli(url, *args)
        assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, (args, out.stderr)


def test_requeue_campaigns_again_after_a_loss_and_restarts_the_command(tmp_path: Path) -> None:
    url = _url(tmp_path)
    # each run of CMD prints its term and waits; the third run ends by itself with code 5
    child = (
        "import os, sys, time\n"
        "print('up', os.environ['DISTLOCK_TERM'], flush=True)\n"
        f"runs = open({str(tmp_path / 'runs')!r}, 'a+'); runs.write('x'); runs.flush(); runs.seek(0)\n"
        "sys.exit(5) if len(runs.read()) >= 3 else time.sleep(120)\n"
    )
    with subprocess.Popen(
        distlock_cmd(url, "elect", "--requeue", "--ttl", "2", "svc", "A", PY, "-c", child),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        terms = []
        for _ in range(2):
            word, term = proc.stdout.readline().split()
            assert word == "up"
            terms.append(int(term))
            with distlock.connect(url) as store:  # taken away: CMD is stopped, elect campaigns and leads again
                assert store.break_lock("svc")
        word, term = proc.stdout.readline().split()
        terms.append(int(term))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err  # the third run ended by itself: elect exits with its code
    assert terms == sorted(set(terms)), terms  # a new, higher term each time
    assert err.count("campaigning again") == 2, err
    assert cli(url, "leader", "svc").stdout.strip() == "-"  # resigned at the end


def test_requeue_needs_a_command_and_no_wait_limit(tmp_path: Path) -> None:
    url = _url(tmp_path)
    for args in (("elect", "--requeue", "svc", "A"), ("elect", "--requeue", "-w", "5", "svc", "A", "--", "true")):
        r = cli(url, *args)
        assert r.returncode == 2 and "--requeue" in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr

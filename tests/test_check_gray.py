"""``distlock check`` gray link faults (freeze, half-open, slow) and the told-late figure.

The URL rewriting that puts each worker behind its own proxies is unit-tested for every scheme; the runs are
real (worker processes, a real redis-server, loopback proxies) and short; the told-late analysis is tested on
hand-made histories, including the cases it must not judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distlock._errors import ConfigError
from distlock.checker.gray import WorkerLinks, data_nodes, link_hosts, proxied_url
from distlock.checker.history import analyse, told_late
from tests.test_check import check
from tools.servers.redis import redis_binary
from tools.servers.redis_cluster import RedisCluster
from tools.servers.redis_sentinel import SentinelDeployment

needs_redis_server = pytest.mark.skipif(redis_binary() is None, reason="redis-server is not installed")

P1, P2, P3 = ("127.0.0.1", 40001), ("127.0.0.1", 40002), ("127.0.0.1", 40003)


# -- URL rewriting -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "hosts", "expected"),
    [
        ("redis://127.0.0.1:6379/0", [("127.0.0.1", 6379)], "redis://127.0.0.1:40001/0"),
        ("redis://:s3cret@db.example:6380/2?socket_timeout=3", [("db.example", 6380)],
         "redis://:s3cret@127.0.0.1:40001/2?socket_timeout=3"),
        ("rediss://user:pw@cache", [("cache", 6379)], "rediss://user:pw@127.0.0.1:40001"),
        ("redlock://a:7000,b:7001,c", [("a", 7000), ("b", 7001), ("c", 6379)],
         "redlock://127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003"),
        ("zookeeper://z1:2181,z2:2182,z3/app/locks?session_timeout=4", [("z1", 2181), ("z2", 2182), ("z3", 2181)],
         "zookeeper://127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003/app/locks?session_timeout=4"),
        ("zk://z1/chroot", [("z1", 2181)], "zk://127.0.0.1:40001/chroot"),
        ("etcd://e1:2379,e2:22379,e3:32379", [("e1", 2379), ("e2", 22379), ("e3", 32379)],
         "etcd://127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003"),
        ("mysql://root:pw@127.0.0.1:3307/locks?mode=session", [("127.0.0.1", 3307)],
         "mysql://root:pw@127.0.0.1:40001/locks?mode=session"),
        ("mariadb://u@m/db", [("m", 3306)], "mariadb://u@127.0.0.1:40001/db"),
        ("postgresql://u:p%40ss@[::1]:5433/db?mode=lease", [("::1", 5433)],
         "postgresql://u:p%40ss@127.0.0.1:40001/db?mode=lease"),
        ("postgres://pg/db", [("pg", 5432)], "postgres://127.0.0.1:40001/db"),
    ],
)  # fmt: skip
def test_proxied_url_replaces_every_host_and_keeps_the_rest(url: str, hosts: list[Any], expected: str) -> None:
    assert link_hosts(url) == hosts
    assert proxied_url(url, [P1, P2, P3][: len(hosts)]) == expected
    assert link_hosts(expected) == [P1, P2, P3][: len(hosts)]


def test_proxied_url_formats_ipv6_proxies_and_checks_the_count() -> None:
    assert proxied_url("redis://h:1/0", [("::1", 9)]) == "redis://[::1]:9/0"
    with pytest.raises(ValueError, match="3 host"):
        proxied_url("redlock://a,b,c", [P1])


@pytest.mark.parametrize(
    "url", ["sqlite:///x.db", "memory://", "unix:///run/redis.sock", "postgresql://u@pg/db?host=/run/postgresql"]
)
def test_stores_without_a_link_in_the_url_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        link_hosts(url)


@needs_redis_server
def test_worker_links_put_a_proxy_in_front_of_each_host(redis_url: str) -> None:
    import redis

    links = WorkerLinks(redis_url)
    try:
        assert len(links.proxies) == 1 and links.url != redis_url
        client: Any = redis.Redis.from_url(links.url, socket_timeout=0.5)
        assert client.ping()
        links.freeze()
        with pytest.raises(redis.exceptions.TimeoutError):
            client.ping()  # silent: no reset, no reply
        links.heal()
        client.close()
    finally:
        links.close()


def test_a_sentinel_url_gets_a_proxy_for_each_data_node_it_announces(
    redis_sentinel_servers: SentinelDeployment,
) -> None:
    d = redis_sentinel_servers
    nodes = data_nodes(d.url)
    assert sorted(p for _, p in nodes) == sorted([d.master.port, d.replica.port]), nodes
    links = WorkerLinks(d.url, nodes)
    try:
        assert len(links.proxies) == len(d.sentinels) + 2
        data_proxies = links.proxies[len(d.sentinels) :]
        for (host, port), proxy in zip(nodes, data_proxies, strict=True):
            assert f"{host}:{port}=127.0.0.1:{proxy.port}" in links.url
    finally:
        links.close()


def test_a_cluster_url_gets_a_proxy_for_every_node_and_a_plain_server_none(
    redis_cluster_servers: RedisCluster, redis_url: str
) -> None:
    nodes = data_nodes(redis_cluster_servers.url)
    assert sorted(p for _, p in nodes) == sorted(n.port for n in redis_cluster_servers.nodes)
    assert data_nodes(redis_url) == [] and data_nodes("redlock://127.0.0.1:1,127.0.0.1:2") == []


# -- runs ----------------------------------------------------------------------------------------------------
def test_freeze_on_sentinel_silences_the_link_to_the_master_too(
    tmp_path: Path, redis_sentinel_servers: SentinelDeployment
) -> None:
    # before the data nodes had proxies of their own, only the links to the sentinels froze: the holder kept
    # renewing on the master and no holding was ever lost under a gray fault on Sentinel
    url = redis_sentinel_servers.url
    code, report, output = check(tmp_path, "--seconds", "6", "--faults", "freeze", url=url)
    assert report["faults"]["freeze"]["landed"] >= 1, output
    late = report["told_late"]
    assert late["told"] >= 1 and late["late"] == 0, late
    assert code == 0 and report["ok"], output

@needs_redis_server
def test_freeze_on_redis_reports_the_told_late_figure(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "5", "--spawn", "--faults", "freeze")
    assert report["faults"]["freeze"]["landed"] >= 1, output
    late = report["told_late"]
    # the frozen holder lost the lock (its lease could not be renewed) and someone else got it next
    assert late["handovers"] >= 1 and late["told"] >= 1 and late["max_ms"] is not None, late
    assert "told late" in output
    # the lease clock: lost fired at the local lease end, before the server could grant the lock to anyone else
    assert late["late"] == 0 and late["max_ms"] <= 0, late
    assert code == 0 and report["ok"], output
    assert report["fenced"]["stale_accepted"] == 0 and report["overlaps"]["silent"] == 0


@needs_redis_server
def test_half_open_and_slow_on_redis_land(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "8", "--spawn", "--faults", "half-open,slow")
    assert report["faults"]["half-open"]["landed"] >= 1 and report["faults"]["slow"]["landed"] >= 1, output
    late = report["told_late"]
    assert late["max_ms"] is None or late["told"] >= 1
    assert (code == 0) == (late["late"] == 0 and report["ok"]), output
    assert report["fenced"]["stale_accepted"] == 0 and report["fence_violations"] == 0


@needs_redis_server
def test_a_holder_that_ignores_lost_is_caught_as_told_late(tmp_path: Path) -> None:
    """The figure can fail: distlock's lock, used by a worker that never looks at ``lost`` (it learns of the loss
    only from ``release()``), keeps working under a freeze while another worker is granted the lock."""
    code, report, output = check(tmp_path, "--seconds", "5", "--spawn", "--algorithm", "ignore-lost",
                                 "--faults", "freeze")  # fmt: skip
    assert code == 1, output
    late = report["told_late"]
    assert late["late"] >= 1 and late["max_ms"] > 0, late
    assert any("told late" in v for v in report["safety_violations"])
    assert report["fenced"]["stale_accepted"] == 0  # fencing still kept the data right


def test_async_api_on_mysql_is_told_before_the_next_grant_under_freeze(tmp_path: Path, mysql_url: str) -> None:
    """``--api async``: the workers drive the asyncio API (aiomysql, renewals as tasks); a frozen holder is told
    it lost the lock before anyone else is granted it, as on the sync side."""
    code, report, output = check(tmp_path, "--seconds", "5", "--api", "async", "--faults", "freeze", url=mysql_url)
    assert "asyncio API" in output
    assert report["faults"]["freeze"]["landed"] >= 1, output
    late = report["told_late"]
    assert late["handovers"] >= 1 and late["late"] == 0 and late["max_ms"] is not None and late["max_ms"] <= 0, late
    assert code == 0 and report["ok"], output
    assert report["fenced"]["stale_accepted"] == 0 and report["overlaps"]["silent"] == 0


def test_async_api_holder_that_ignores_lost_is_caught(tmp_path: Path, mysql_url: str) -> None:
    """The async run can fail too: the same lock, used by an asyncio worker that never looks at ``lost``."""
    code, report, output = check(tmp_path, "--seconds", "5", "--api", "async", "--algorithm", "ignore-lost",
                                 "--faults", "freeze", url=mysql_url)  # fmt: skip
    assert code == 1, output
    assert report["told_late"]["late"] >= 1, report["told_late"]
    assert report["fenced"]["stale_accepted"] == 0


def test_gray_faults_alone_are_refused_on_sqlite(tmp_path: Path) -> None:
    code, _, output = check(tmp_path, "--seconds", "1", "--faults", "freeze", url=f"sqlite:///{tmp_path}/l.db")
    assert code == 2 and "no network link" in output, output


def test_gray_faults_among_others_are_skipped_on_sqlite(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "1", "--faults", "freeze,half-open,slow,kill",
                                 url=f"sqlite:///{tmp_path}/l.db")  # fmt: skip
    assert code == 0, output
    assert "skipped" in report["faults_skipped"] and "skipped" in output
    assert "freeze" not in report["faults"]


# -- the analysis on hand-made histories --------------------------------------------------------------------
def op(w: int, t_acq: float, t_rel: float, told: bool = False, t_done: float | None = None) -> dict[str, Any]:
    return {"op": f"{w}.{t_acq}", "worker": w, "fence": None, "t_start": t_acq, "t_acq": t_acq, "t_rel": t_rel,
            "t_done": t_rel if t_done is None else t_done, "told": told, "fenced": "n/a"}  # fmt: skip


def grant(o: dict[str, Any]) -> dict[str, Any]:
    return {"op": o["op"], "worker": o["worker"], "t_acq": o["t_acq"]}


def test_told_late_is_when_the_holder_was_told_minus_the_next_grant() -> None:
    a, b = op(0, 1.0, 3.5, told=True), op(1, 3.0, 3.2)
    # told by on_lost at 2.9, the next holder got it at 3.0: told 100 ms early
    r = told_late([a, b], [grant(a), grant(b)], {a["op"]: 2.9})
    assert r == {"handovers": 1, "told": 1, "late": 0, "never_told": 0, "max_ms": -100.0, "not_judged": 0}
    # told at 3.4, while it still worked: 400 ms late
    r = told_late([a, b], [grant(a), grant(b)], {a["op"]: 3.4})
    assert r["late"] == 1 and r["max_ms"] == 400.0
    # no on_lost: release() said so at 3.6
    assert told_late([{**a, "t_done": 3.6}, b])["max_ms"] == pytest.approx(600.0)
    # ...but a holder that had called release() (at 2.5) before the next grant no longer relied on the lock
    assert told_late([{**a, "t_rel": 2.5, "t_done": 3.6}, b])["max_ms"] == pytest.approx(-500.0)


def test_told_late_counts_a_holder_overtaken_and_never_told() -> None:
    a, b = op(0, 1.0, 3.5), op(1, 3.0, 3.2)
    r = told_late([a, b])
    assert r["never_told"] == 1 and r["late"] == 1 and r["told"] == 0
    # a holder stuck on a dead link never reports its operation: its grant alone still counts
    stuck = grant(op(0, 1.0, 0))
    assert told_late([b], [stuck, grant(b)])["never_told"] == 1
    # ...unless it was told before the next grant
    assert told_late([b], [stuck, grant(b)], {stuck["op"]: 2.0})["late"] == 0


def test_clean_hand_overs_paused_and_killed_holders_are_not_judged() -> None:
    clean = [op(0, 1.0, 1.1), op(1, 1.2, 1.3)]
    assert told_late(clean)["handovers"] == 0
    a, b = op(0, 1.0, 6.0), op(1, 3.0, 3.2)
    paused = [{"kind": "pause", "t": 1.05, "worker": 0, "landed": True}]
    r = told_late([a, b], faults=paused, lost={a["op"]: 6.0})
    assert r["handovers"] == 0 and r["not_judged"] == 1
    killed = [{"kind": "kill", "t": 1.5, "worker": 0, "landed": True}]
    assert told_late([b], [grant(a), grant(b)], faults=killed)["handovers"] == 0
    # killed inside release(), after its release reached the server and the next holder was granted the lock
    killed_late = [{"kind": "kill", "t": 3.1, "worker": 0, "landed": False}]
    assert told_late([b], [grant(a), grant(b)], faults=killed_late)["handovers"] == 0


def test_analyse_makes_a_late_hand_over_a_safety_violation() -> None:
    a, b = op(0, 1.0, 3.5, told=True), op(1, 3.0, 3.2)
    report = analyse([a, b], [], [a["op"], b["op"]], ttl=1.0, run_end=4.0, lost={a["op"]: 3.25})
    assert report["ok"] is False and report["told_late"]["max_ms"] == 250.0
    assert any("told late" in v for v in report["safety_violations"])
    fine = analyse([a, b], [], [a["op"], b["op"]], ttl=1.0, run_end=4.0, lost={a["op"]: 2.5})
    assert fine["ok"] is True

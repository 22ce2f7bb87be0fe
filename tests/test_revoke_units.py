"""Release requests, the pure part: how each layout carries a request and its reason (ZooKeeper node data,
etcd key values, the Redis renewal reply) and reads it back, for any reason text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlock import ConfigError
from distlock._backends.etcd import keys as ek
from distlock._backends.redis import calls as rc
from distlock._backends.zookeeper import layout
from distlock._core.types import Mode
from distlock._core.validate import MAX_REASON_CHARS, check_reason

REASONS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=MAX_REASON_CHARS
)


@given(REASONS)
def test_zookeeper_a_distlock_node_keeps_its_owner_and_carries_the_reason(reason: str) -> None:
    data = layout.node_data("h:1:t", Mode.EXCLUSIVE)
    asked = layout.revoke_data(data, "_c_x-lock-0000000001", reason)
    assert asked is not None
    assert layout.revoke_reason(asked) == reason
    assert layout.parse_data(asked, "_c_x-lock-0000000001") == ("h:1:t", None)  # inspect still shows the owner
    assert layout.revoke_reason(data) is None


def test_zookeeper_curator_s_message_both_ways() -> None:
    assert layout.revoke_reason(b"__REVOKE__") == ""  # Curator's Revoker asks, with no reason
    for curator_data in (b"", b"127.0.0.1", None):  # a Curator mutex node (revocable ones have empty data)
        assert layout.revoke_data(curator_data, "_c_x-lock-0000000001", "why") == b"__REVOKE__"
        assert layout.revoke_data(curator_data, "_c_x-__WRIT__0000000001", "why") == b"__REVOKE__"
    assert layout.revoke_data(b"10.0.0.1", "_c_x-lease-0000000001", "why") is None  # Curator's semaphore lease
    for not_asked in (b"", b"127.0.0.1", b"{}", b'{"owner":"x"}', b"[1]", b"__REVOKE__x", b"\xff{"):
        assert layout.revoke_reason(not_asked) is None


def test_zookeeper_an_election_leader_s_value_is_left_as_it_is() -> None:
    assert layout.revoke_data(b"leader-1", "_c_x-latch-0000000001", "why") == b"leader-1"


@given(REASONS)
def test_etcd_a_distlock_key_keeps_its_owner_and_carries_the_reason(reason: str) -> None:
    raw = ek.owner_value("h:1:t", Mode.SEMAPHORE, 3)
    asked = ek.revoke_value(raw, reason)
    assert asked is not None and ek.revoke_reason(asked) == reason
    assert ek.parse_owner(asked) == ("h:1:t", 3)
    assert ek.revoke_reason(raw) is None


def test_etcd_an_election_value_is_kept_and_a_go_mutex_is_not_asked() -> None:
    assert ek.revoke_value(b"leader-1", "why") == b"leader-1"
    assert ek.revoke_reason(b"leader-1") == ""
    assert ek.revoke_value(b"", "why") is None  # Go's Mutex / etcdctl lock: nobody reads a request there
    assert json.loads(ek.revoke_value(b'{"owner":"o","mode":"lock","permits":1}', "") or b"")["revoke"] == ""


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_redis_a_renewal_reply_carries_the_request_and_its_reason(reason: str) -> None:
    assert rc.renew_reply(1) == (True, None)
    assert rc.renew_reply(0) == (False, None)
    reply = f"revoke|-1|abc123|{reason}".encode()
    assert rc.renew_reply(reply) == (True, ("abc123", reason))


@pytest.mark.parametrize(
    ("reason", "why"),
    [(7, "must be a str"), ("x" * (MAX_REASON_CHARS + 1), "the limit"), ("a\x00b", "NUL"), ("\ud800", "UTF-8")],
)
def test_a_bad_reason_is_refused_in_one_line(reason: object, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_reason(reason, name="n", backend="redis")
    assert why in str(err.value) and "\n" not in str(err.value)

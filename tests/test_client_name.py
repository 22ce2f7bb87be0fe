"""Client names (``connect(..., client_name=...)``, ``$DISTLOCK_CLIENT_NAME``) and name templates of
``synchronized``: the owner string's round trip (property test, pure), the one-line errors, the log events'
field, Redis's CLIENT SETNAME kept (a real Redis). Every backend's stored holding is in the conformance suite
(``test_client_name_is_stored_with_the_holding_for_every_reader``)."""

from __future__ import annotations

import io
import logging
import time
from dataclasses import dataclass

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

import distlock
from distlock._core import ids, template
from distlock._core.types import HolderInfo
from distlock._errors import ConfigError
from distlock.cli import feedback

CLIENT_NAMES = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp", "Cn", "Co", "Cf"), blacklist_characters=":@"),
    min_size=1,
    max_size=ids.MAX_CLIENT_NAME,
).filter(lambda s: s.isprintable() and not any(c.isspace() for c in s))
LOCALS = st.from_regex(r"(thread-[0-9]{1,20}|task-[0-9a-f]{1,16})", fullmatch=True)


@given(local=LOCALS, client=CLIENT_NAMES)
def test_an_owner_string_gives_back_its_owner_id_and_client_name(local: str, client: str) -> None:
    assert ids.check_client_name(client) == client
    stored = ids.owner_id(local, client)
    assert ids.split_owner(stored) == (ids.owner_id(local), client)
    h = HolderInfo(stored, 7, "lock", 1.0)
    assert (h.owner, h.client_name) == (ids.owner_id(local), client)
    assert ids.split_owner(ids.owner_id(local)) == (ids.owner_id(local), None)


@pytest.mark.parametrize(
    "record",
    [
        "foreign:user@example.org:_c_0b9b1a4e-lock-0000000001",  # a Curator node's data: an '@' before a ':'
        "unknown:lease:694d7f3a1b2c",
        "@",
        "host:1:thread-2@",
        "x" * 10 + "@" + "y" * (ids.MAX_CLIENT_NAME + 1),
    ],
)
def test_an_owner_string_without_a_client_name_is_left_whole(record: str) -> None:
    assert ids.split_owner(record) == (record, None)


@pytest.mark.parametrize("bad", ["", "web 1", "web:1", "web@1", "a\x00", "tab\t", "x" * 65])
def test_a_bad_client_name_is_a_one_line_config_error(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        distlock.connect("memory://", client_name=bad)
    assert "\n" not in str(err.value) and "client_name" in str(err.value)


def test_the_environment_names_the_client_unless_the_option_does(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("DISTLOCK_CLIENT_NAME", "cron-host-3")
    with distlock.connect("memory://") as store, store.lock(name):
        assert store.client_name == "cron-host-3"
        assert store.inspect(name).holders[0].client_name == "cron-host-3"  # type: ignore[union-attr]
    with distlock.connect("memory://?client_name=web-2") as store:
        assert store.client_name == "web-2"
    monkeypatch.setenv("DISTLOCK_CLIENT_NAME", "bad name")
    with pytest.raises(ConfigError, match=r"^\$DISTLOCK_CLIENT_NAME 'bad name'"):
        distlock.connect("memory://")
    monkeypatch.delenv("DISTLOCK_CLIENT_NAME")
    with distlock.connect("memory://") as store:
        assert store.client_name is None


def test_log_events_carry_the_client_name(name: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="distlock")
    with distlock.connect("memory://", client_name="web-1") as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire()
        assert store.break_lock(name)
        assert lock.lost.wait(5)
    events = {r.event: r for r in caplog.records if getattr(r, "event", None)}  # type: ignore[attr-defined]
    assert {"grant", "lost"} <= set(events), sorted(events)
    assert all(r.client_name == "web-1" for r in events.values())  # type: ignore[attr-defined]


def test_redis_still_names_its_connections(redis_url: str, name: str) -> None:
    with distlock.connect(redis_url, client_name="web-1") as store, store.lock(name, ttl=5):
        raw = redis.Redis.from_url(redis_url)
        try:
            names = {c.get("name") for c in raw.client_list()}
        finally:
            raw.close()
        assert "web-1" in names, names
        assert store.inspect(name).holders[0].client_name == "web-1"  # type: ignore[union-attr]


def test_a_given_redis_client_s_name_labels_the_store(redis_url: str, name: str) -> None:
    given = redis.Redis.from_url(redis_url, client_name="web-7")
    unusable = redis.Redis.from_url(redis_url, client_name="web:7")  # a fine Redis name, not a label (":")
    try:
        with distlock.connect(client=given) as store, store.lock(name, ttl=5):
            assert store.client_name == "web-7"
            assert store.inspect(name).holders[0].client_name == "web-7"  # type: ignore[union-attr]
        with distlock.connect(client=unusable) as store:
            assert store.client_name is None  # the store still opens: the name only cannot label it
    finally:
        given.close()
        unusable.close()


# -- name templates (pure) -------------------------------------------------------------------------------------


@dataclass
class Order:
    id: int
    lines: list[str]


def test_a_template_formats_attributes_items_and_defaults() -> None:
    def handle(order: Order, region: str = "eu", *rest: object, **extra: object) -> None: ...

    roots = template.fields("order/{order.id}/{region}/{order.lines[0]}/{{literal}}")
    assert roots == ["order", "region", "order"]
    names = template.NameTemplate("order/{order.id}/{region}/{order.lines[0]}/{{literal}}", handle, roots, backend=None)
    assert names.name_of((Order(42, ["a"]),), {}) == "order/42/eu/a/{literal}"
    assert names.name_of((), {"order": Order(7, ["b"]), "region": "us"}) == "order/7/us/b/{literal}"
    with pytest.raises(ConfigError, match="AttributeError"):
        names.name_of(("not an order",), {})
    with pytest.raises(TypeError):  # what the call itself would raise
        names.name_of((), {})
    with pytest.raises(ConfigError, match="'rest' is not a parameter"):
        template.NameTemplate("x/{rest}", handle, ["rest"], backend=None)


def test_a_name_without_fields_is_no_template() -> None:
    assert template.fields("nightly-report") is None
    assert template.fields("a{{b}}") is None  # used as given (as before templates existed)
    with pytest.raises(ConfigError, match="malformed"):
        template.fields("order/{id")


# -- the waiting feedback's reader (pure: a callable stands for the store's inspect) -----------------------------


def test_a_failing_read_of_the_holder_leaves_it_out_and_never_ends_the_wait() -> None:
    def read() -> object:
        raise distlock.BackendError("no answer", backend="redis")

    out = io.StringIO()
    with feedback.waiting(True, "'busy'", read, feedback.lock_holders, 10.0, stream=out):
        time.sleep(feedback.VERBOSE_DELAY + 0.5)  # the body (the acquire) runs on, unaware
    assert out.getvalue().startswith("distlock: waiting for 'busy' ("), out.getvalue()
    assert "held by" not in out.getvalue() and out.getvalue().endswith("of 10s)\n"), out.getvalue()


@pytest.mark.parametrize("bad", [42, 4.2, True, b"web-1"])
def test_a_client_name_that_is_no_str_is_refused_not_turned_into_text(bad: object) -> None:
    with pytest.raises(ConfigError, match=rf"^client_name must be a str, not {type(bad).__name__}"):
        distlock.connect("memory://", client_name=bad)


def test_keyword_options_given_as_none_are_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISTLOCK_CLIENT_NAME", raising=False)
    with distlock.connect("memory://", client_name=None) as store:
        assert store.client_name is None  # not the text "None"
    monkeypatch.setenv("DISTLOCK_CLIENT_NAME", "cron-host-3")
    with distlock.connect("memory://?client_name=web-2", client_name=None) as store:
        assert store.client_name == "web-2"  # None overrides nothing

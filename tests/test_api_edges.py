"""API paper cuts of a first use as a real package: each one a clear ConfigError, or the obvious behaviour."""

from __future__ import annotations

import pytest

import distlock


def test_a_lost_lock_can_be_taken_again_by_the_same_object(name: str) -> None:
    with distlock.connect("memory://") as store:
        lock = store.lock(name, ttl=0.2, auto_renew=False)
        assert lock.acquire()
        assert lock.lost.wait(2)
        assert not lock.owned()
        assert lock.acquire(timeout=2)  # was: "already held by this owner" while owned() said False
        assert lock.owned() and not lock.lost.is_set()
        lock.release()


def test_a_lost_reentrant_holding_cannot_be_reentered(name: str) -> None:
    with distlock.connect("memory://") as store:
        rlock = store.rlock(name, ttl=0.2, auto_renew=False)
        assert rlock.acquire()
        assert rlock.lost.wait(2)
        with pytest.raises(distlock.LockLost):
            rlock.acquire()


def test_timeout_with_blocking_false_is_refused(name: str) -> None:
    with distlock.connect("memory://") as store:
        with pytest.raises(distlock.ConfigError, match="blocking=False"):
            store.lock(name).acquire(blocking=False, timeout=1)
        with pytest.raises(distlock.ConfigError, match="blocking=False"):
            store.multilock([name, name + "2"]).acquire(blocking=False, timeout=1)
        assert store.inspect(name) is None


async def test_timeout_with_blocking_false_is_refused_async(name: str) -> None:
    store = await distlock.connect_async("memory://")
    try:
        with pytest.raises(distlock.ConfigError, match="blocking=False"):
            await store.lock(name).acquire(blocking=False, timeout=1)
    finally:
        await store.aclose()


@pytest.mark.parametrize("ttl", [0.001, 0.049])
def test_a_lease_too_short_to_outlast_a_round_trip_is_refused(ttl: float, name: str) -> None:
    with distlock.connect("memory://") as store:
        with pytest.raises(distlock.ConfigError, match="at least"):
            store.lock(name, ttl=ttl)
        lock = store.lock(name, ttl=1.0)
        assert lock.acquire()
        with pytest.raises(distlock.ConfigError, match="at least"):
            lock.extend(ttl)
        assert lock.owned()
        lock.release()


def test_empty_multilock_is_a_config_error() -> None:
    with distlock.connect("memory://") as store, pytest.raises(distlock.ConfigError):
        store.multilock([])


def test_malformed_url_is_a_config_error_without_the_password() -> None:
    with pytest.raises(distlock.ConfigError) as err:
        distlock.connect("redis://u:s3cret@[::1")
    assert "s3cret" not in str(err.value)
    assert "\n" not in str(err.value)


def test_scrub_removes_the_secret_but_not_words_that_contain_its_letters() -> None:
    from distlock._url import scrub

    assert scrub("connection to port 5432 failed: password=p", "p") == "connection to port 5432 failed: password=***"
    assert (
        scrub("auth 'hunter2' rejected (hunter2x is not it)", "hunter2") == "auth '***' rejected (hunter2x is not it)"
    )
    assert "s3cret" not in scrub("redis://u:s3cret@h:1/0 refused", None)

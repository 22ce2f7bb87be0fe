"""The Redis scripts' texts are pinned by their SHA1s.

A script's text is its identity on a server: clients call it by its SHA (``EVALSHA``), servers cache it under
that SHA, and a client of another version that sends the same text shares the cached script. A change of one
byte (a helper of the prelude, a comment, the split of the scripts over modules) is a new script: the pins say
so here, where the change is made on purpose (update the pin, and say in the changelog that the scripts
changed), and not on a server."""

from __future__ import annotations

import hashlib

from distlock._backends.redis import lua
from distlock._backends.redis.lua import latch as latch_lua

#: the SHA1 of every script's text, as distlock sends it
PINNED = {
    "acquire": "3406ac73902f378a956ddce37685191886e53625",
    "release": "1171ede8a01afe0dde76468a39d2b6e83ce33f4d",
    "abandon": "9e5a3f88cd8c574ab4300f42af4fd81f6656a3da",
    "renew": "72f88262b73c5d6a15098db82773bd5486a0004e",
    "holds": "c51b0a3b85626c233b07153c4c0f750c632652d9",
    "inspect": "93000af0941967c866b15dfde65458c978c12344",
    "break": "ca1c43f108c53f999de32fdda34fc660b669c1fd",
    "fence_floor": "02c4a0269eddf30cd6f758c16c35be1e79630386",
    "proclaim": "315ab47c4f2199835f58ff3d0d5c42e4dab15d8b",
    "request": "a6a64dd4d4a027f618ff236601204e36ba858132",
    "resize": "941d2b097a1385eb66b03ffa0ed1fb1375307609",
}


def test_every_script_text_is_the_pinned_one() -> None:
    assert {k: hashlib.sha1(v.encode()).hexdigest() for k, v in lua.SCRIPTS.items()} == PINNED
    assert lua.SHA == PINNED  # what the calls name is what the texts hash to
    # the concatenation too: no script moved to another name
    assert (
        hashlib.sha1("".join(lua.SCRIPTS.values()).encode()).hexdigest() == "cc36625c153432bcaee53e0dfc7e631b9b22900c"
    )


#: the count-down latch's two scripts (``lua/latch.py``: one key of their own, no prelude, sent by ``EVAL``)
LATCH_PINNED = {
    "latch_open": "091f763b0174379ea54d6061bb37d7f9bfaa4631",
    "latch_count_down": "4cdea9674d9eaf3ded7edabf4e1c32c9568bf162",
}


def test_the_latch_scripts_are_the_pinned_ones_and_touch_only_their_key() -> None:
    assert latch_lua.SHA == LATCH_PINNED
    for text in latch_lua.SCRIPTS.values():
        assert "KEYS[2]" not in text and lua.WRONGTYPE in text


def test_every_script_starts_with_the_one_prelude() -> None:
    assert all(text.startswith(lua.prelude.PRELUDE) for text in lua.SCRIPTS.values())
    assert lua.WRONGTYPE in lua.prelude.PRELUDE

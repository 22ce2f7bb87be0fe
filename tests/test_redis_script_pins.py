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
    "acquire": "a86ebad3f18f2e7793b033be976756c37a75f448",
    "release": "a7a4236ffcece49e08134ac8ea170fe469a7085c",
    "abandon": "92f97c003df1b0b032903e7556e91377a7de31b3",
    "renew": "ee61a18b9661ff98052ee3bd98cf97896748f113",
    "holds": "781c7aae270630c075bc313bb2e0cb30d7445c3c",
    "inspect": "98ac7ab218d62cf1527dcc10d6c2fc4c0a9adf8b",
    "break": "7edc7fc87ca2aef0a8baaf50e058260a80237ee1",
    "fence_floor": "afb984140f09acfcad525e505ba47ce72cbc11e2",
    "proclaim": "48086ef52c966f527894175f2ec4625bc7625b56",
    "request": "b875600b98fb0f737955cc621972427fe3b515cd",
}


def test_every_script_text_is_the_pinned_one() -> None:
    assert {k: hashlib.sha1(v.encode()).hexdigest() for k, v in lua.SCRIPTS.items()} == PINNED
    assert lua.SHA == PINNED  # what the calls name is what the texts hash to
    # the concatenation too: no script moved to another name
    assert (
        hashlib.sha1("".join(lua.SCRIPTS.values()).encode()).hexdigest() == "dd8dc5b49c8319aadec1be50583c36b17deaeeca"
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

"""The Redis scripts' texts are pinned by their SHA1s.

A script's text is its identity on a server: clients call it by its SHA (``EVALSHA``), servers cache it under
that SHA, and a client of another version that sends the same text shares the cached script. A change of one
byte (a helper of the prelude, a comment, the split of the scripts over modules) is a new script: the pins say
so here, where the change is made on purpose (update the pin, and say in the changelog that the scripts
changed), and not on a server."""

from __future__ import annotations

import hashlib

from distlock._backends.redis import lua

#: the SHA1 of every script's text, as distlock sends it
PINNED = {
    "acquire": "5866b8b518fa0e05c8841441d7ccfb24113111f7",
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
        hashlib.sha1("".join(lua.SCRIPTS.values()).encode()).hexdigest() == "007e39d4a9d65f0ad9909f38cdf57f811f378c3a"
    )


def test_every_script_starts_with_the_one_prelude() -> None:
    assert all(text.startswith(lua.prelude.PRELUDE) for text in lua.SCRIPTS.values())
    assert lua.WRONGTYPE in lua.prelude.PRELUDE

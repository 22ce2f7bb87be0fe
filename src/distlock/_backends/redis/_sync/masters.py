# GENERATED from src/distlock/_backends/redis/_async/masters.py by scripts/gen_sync.py: edit that file, not this one.
"""The N independent masters of a Redlock store (``Masters``), and the one way the Redlock backend asks
them: every master at once, each under its own deadline, each answer a reply or an exception; a majority
(``quorum``) of answers is what every operation needs, and fewer is a ``QuorumError``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...._errors import BackendError, QuorumError
from .. import _fanout_sync as fan
from .. import calls as rc
from .group import Group
from .node import Node
from .wire import Restarted


class Masters:
    """The masters (their ``Node``), the majority, the per-master deadline and the fan-out."""

    def __init__(self, nodes: list[Node], node_timeout: float, scheme: str) -> None:
        self.nodes = nodes
        self.counter = nodes[0].counter  # the same on every master
        self.quorum = len(nodes) // 2 + 1
        self.node_timeout = node_timeout
        self.scheme = scheme
        self.fanout = fan.Fanout(len(nodes))
        #: their wake-up listeners, read together by the store's waiting threads (``attempt.RedlockAttempt``)
        self.listeners = Group([n.listener for n in nodes])

    def deadline(self, ttl: float | None = None) -> float:
        return self.node_timeout if ttl is None else max(0.005, min(self.node_timeout, ttl / 5.0))

    def fan(self, calls: Sequence[Callable[[], Any]], timeout: float | None = None) -> list[Any]:
        """Run the calls in parallel; each result is a reply or the exception (timeouts included)."""
        return self.fanout.gather(calls, self.node_timeout if timeout is None else timeout)

    def scatter(self, nodes: Sequence[Node], timeout: float, script: str, name: str, *args: Any) -> list[Any]:
        """The same script on every node, in parallel on the wire (one thread on the sync side, no pool).
        Each result is the reply or an exception; a node that lost its scripts (restart) is retried alone."""
        return self.scatter_each(nodes, timeout, script, name, [args] * len(nodes))

    def scatter_each(
        self,
        nodes: Sequence[Node],
        timeout: float,
        script: str,
        name: str,
        each: Sequence[Sequence[Any]],
        expects: Sequence[str | None] | None = None,
    ) -> list[Any]:
        """As ``scatter``, with each node's own arguments (``each[i]``); ``expects[i]``: the run id the
        request to node i was prepared with (a new connection that finds another one fails that request)."""
        first = each[0] if each else ()
        if all(a == first for a in each):
            # encoded once for every master
            packed: bytes | list[bytes] = rc.packed_call(script, name, *first, counter=self.counter)
        else:
            packed = [rc.packed_call(script, name, *a, counter=self.counter) for a in each]
        packs = [packed] * len(nodes) if isinstance(packed, bytes) else packed
        exp = list(expects) if expects is not None else [None] * len(nodes)
        requests = [(n.plain_wire, p, e) for n, p, e in zip(nodes, packs, exp, strict=True)]
        results = fan.scatter(requests, timeout, self.fanout)
        out: list[Any] = []
        for n, r, args in zip(nodes, results, each, strict=True):
            if isinstance(r, NoScriptError):
                try:
                    r = n.script(script, name, *args)
                except BackendError as exc:
                    r = exc
            elif isinstance(r, RedisError):
                err = n.error(r, script)
                err.__cause__ = r
                r = err
            out.append(r)
        return out

    @staticmethod
    def silent(r: object) -> bool:
        """No answer in time (as opposed to a refused connection or an error reply)."""
        cause = r.__cause__ if isinstance(r, BackendError) else r
        return isinstance(cause, (TimeoutError, RedisTimeoutError, Restarted))

    def quorum_error(self, name: str | None, what: str, errors: Sequence[BaseException]) -> QuorumError:
        detail = "; ".join(sorted({type(e).__name__ + ": " + str(e)[:120] for e in errors}))
        return QuorumError(
            f"{what}: fewer than {self.quorum} of {len(self.nodes)} masters answered ({detail})",
            name=name,
            backend=self.scheme,
        )

    def need_quorum(self, results: Sequence[Any], name: str | None, what: str) -> None:
        errors = [r for r in results if isinstance(r, BaseException)]
        if len(results) - len(errors) < self.quorum:
            raise self.quorum_error(name, what, errors)

    def each(self, fn: Callable[[Node], Any], timeout: float | None = None) -> list[Any]:
        """``fn(node)`` on every master in parallel (as ``fan``)."""
        return self.fan([functools.partial(fn, n) for n in self.nodes], timeout)

    def close(self) -> None:
        for n in self.nodes:
            try:
                n.close()
            except BackendError:
                pass
        self.fanout.close()

"""The writers of ``distlock check --sink``: how each holding of a worker accesses every sink, once per writer
(``unfenced``, ``fenced``, ``scoped``: see ``sinks``), and what each access came to."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from .._errors import NotHeld
from .sinks import Record, Sink, SinkSpec, open_sink


class Writers:
    """A worker's writers: every access of a holding goes to each sink once per writer (``access``)."""

    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec
        self.sinks = [open_sink(k, spec) for k in spec.sinks]

    def _each(self) -> Iterator[tuple[str, str, Sink, str]]:
        """("sink/writer", writer, sink, resource) for every access a holding makes."""
        for writer in self.spec.writers:
            for sink in self.sinks:
                yield f"{sink.kind}/{writer}", writer, sink, self.spec.resource(writer)

    def access(self, kind: str, worker: int, op: str, fence: int | None, lock: Any) -> dict[str, str]:
        """One access of ``kind`` to every sink by every writer, guarded for the scoped writer by ``lock`` (the
        worker's ``adapters.DistlockLock``; through the asyncio API, made on its event loop by the task that
        holds the lock). Returns ``"sink/writer" -> outcome``: accepted, refused (by the resource's fence
        check, or by the lease), n/a (a fenced writer with no fence), error."""
        if lock.api == "async":
            held = lock.lock._target
            return dict(lock.run(lambda: self._aaccess(kind, worker, op, fence, held)))
        out: dict[str, str] = {}
        for key, writer, sink, resource in self._each():
            if writer == "fenced" and fence is None:
                out[key] = "n/a"
                continue

            def put(sink: Sink = sink, resource: str = resource, writer: str = writer) -> bool:
                return sink.access(resource, _record(kind, worker, op, fence), fence if writer == "fenced" else None)

            out[key] = _outcome(put, lock.scoped if writer == "scoped" else None)
        return out

    async def _aaccess(self, kind: str, worker: int, op: str, fence: int | None, held: Any) -> dict[str, str]:
        """``access`` through the asyncio API: the scoped writer's access is the body of
        ``async with lock.lease_timeout():`` (cancelled at the local lease end, refused on entry after it)."""
        out: dict[str, str] = {}
        for key, writer, sink, resource in self._each():
            if writer == "fenced" and fence is None:
                out[key] = "n/a"
                continue
            use = fence if writer == "fenced" else None
            try:
                if writer == "scoped":
                    async with held.lease_timeout():
                        ok = await sink.aaccess(resource, _record(kind, worker, op, fence), use)
                else:
                    ok = await sink.aaccess(resource, _record(kind, worker, op, fence), use)
            except NotHeld:  # LockLost included: lease_timeout() refused or cancelled the access
                ok = False
            except Exception as err:  # noqa: BLE001 - a sink that failed: reported, the run goes on
                out[key] = _failed(err)
                continue
            out[key] = "accepted" if ok else "refused"
        return out

    def close(self, lock: Any = None) -> None:
        if getattr(lock, "api", "sync") == "async":
            lock.run(self._aclose)
        for sink in self.sinks:
            sink.close()

    async def _aclose(self) -> None:
        for sink in self.sinks:
            await sink.aclose()


def _record(kind: str, worker: int, op: str, fence: int | None) -> Record:
    """One access's record, timed right before it goes out."""
    return {"kind": kind, "worker": worker, "op": op, "fence": fence, "t": time.monotonic()}


def _failed(err: BaseException) -> str:
    return f"error: {type(err).__name__}: {err}"[:100]


def _outcome(access: Callable[[], bool], guard: Callable[[Callable[[], bool]], bool] | None) -> str:
    """How one access went: ``guard(access)`` (the scoped writer's lease check) or ``access()``."""
    try:
        return "accepted" if (guard(access) if guard is not None else access()) else "refused"
    except Exception as err:  # noqa: BLE001 - a sink that failed: reported, the run goes on
        return _failed(err)

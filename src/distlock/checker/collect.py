"""The parent's side of the workers' reports: the pipes they arrive on, the tally, and the history file.

One pipe per worker (``Reports``): a worker killed mid-send breaks only its own (a shared
``multiprocessing.Queue`` would stall every worker; see checker/worker.py). ``Tally`` sorts each report
by kind as it arrives and keeps the faults the injector records beside them, and ``Tally.write_history``
writes the whole run as JSON lines (``--history``) in time order.
"""

from __future__ import annotations

import json
import multiprocessing.connection as mp_conn
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Reports:
    """The parent's ends of the workers' report pipes, one pipe per worker: a worker killed mid-send breaks
    only its own (a shared ``multiprocessing.Queue`` would stall every worker; see checker/worker.py)."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._readers: list[Any] = []

    def pipe(self) -> Any:
        """A new pipe; returns the end to hand to the worker (close it here once the worker has started)."""
        reader, writer = self._ctx.Pipe(duplex=False)
        self._readers.append(reader)
        return writer

    def drain(self, wait: float) -> list[dict[str, Any]]:
        """Every report that has arrived, after waiting up to ``wait`` for the first."""
        if not self._readers:
            time.sleep(wait)
            return []
        got: list[dict[str, Any]] = []
        ready: list[Any] = mp_conn.wait(list(self._readers), timeout=wait)
        for reader in ready:
            try:
                for _ in range(100):  # a bound, so one chatty worker cannot keep the parent here
                    got.append(reader.recv())
                    if not reader.poll():
                        break
            except (EOFError, OSError):  # every copy of the worker's end is closed: it has exited or died
                reader.close()
                self._readers.remove(reader)
        return got

    def close(self) -> None:
        for reader in self._readers:
            reader.close()
        self._readers.clear()


@dataclass
class Tally:
    """What the run has heard so far: the workers' reports by kind, and the faults the injector recorded."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    grants: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)  # arrivals, count-downs, entries and leaves
    lost: dict[str, float] = field(default_factory=dict)  # op id -> when its holder was first told
    at_risk: dict[str, list[float]] = field(default_factory=dict)  # op id -> each time its holding became at risk
    errors: list[str] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    exited: set[int] = field(default_factory=set)
    ready: set[int] = field(default_factory=set)

    def take(self, ev: dict[str, Any]) -> None:
        kind = ev["kind"]
        if kind == "op":
            self.ops.append(ev)
        elif kind == "grant":
            self.grants.append(ev)
        elif kind in ("arrive", "count", "enter", "leave"):
            self.steps.append(ev)
        elif kind == "lost":
            self.lost.setdefault(ev["op"], ev["t"])
        elif kind == "at_risk":
            self.at_risk.setdefault(ev["op"], []).append(ev["t"])
        elif kind == "error":
            self.errors.append(f"worker {ev['worker']}: {ev['error']}")
        elif kind == "exit":
            self.exited.add(ev["worker"])
        elif kind == "ready":
            self.ready.add(ev["worker"])

    def write_history(self, path: Path, final: list[str]) -> None:
        """Every operation, grant, loss and fault as one JSON line each, in time order, then the final state
        of the unfenced resource."""
        lost_recs = [{"kind": "lost", "op": k, "t": t} for k, t in self.lost.items()]
        risk_recs = [{"kind": "at_risk", "op": k, "t": t} for k, times in self.at_risk.items() for t in times]
        with path.open("w") as fh:
            recs = [
                *self.ops,
                *self.grants,
                *self.steps,
                *lost_recs,
                *risk_recs,
                *({**f, "kind": f"fault-{f['kind']}"} for f in self.faults),
            ]
            for rec in sorted(recs, key=_when):
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.write(json.dumps({"kind": "final-unfenced", "items": final}) + "\n")


def _when(rec: dict[str, Any]) -> float:
    return float(rec.get("t_acq", rec.get("t", rec.get("t_done", 0.0))))

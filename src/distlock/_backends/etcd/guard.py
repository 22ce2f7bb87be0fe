"""The ownership condition of an etcd holding, for your own transactions (``distlock.etcd_guard(lock)``, Go's
``Mutex.IsOwner()``): one class for both sides, no I/O. The backends (``_async/__init__.py`` and its generated
twin) make one from a holding's key and create revision."""

from __future__ import annotations

from dataclasses import dataclass

from . import ops


@dataclass(frozen=True)
class EtcdGuard:
    """The condition "this holding is still the one that holds the lock", for your own etcd transactions.

    ``compare()`` is the JSON gateway form (``{"compare": [guard.compare()], "success": [...]}`` on
    ``/v3/kv/txn``); ``etcdctl()`` the ``etcdctl txn`` form; with a gRPC client use
    ``CreateRevision(key) == create_revision``. The write happens only while the lock key still exists
    with this create revision, i.e. while this holding has not been released, lost or broken.
    """

    key: bytes
    create_revision: int

    def compare(self) -> dict[str, object]:
        return ops.create_is(self.key, self.create_revision)

    def etcdctl(self) -> str:
        return f'c("{self.key.decode("utf-8", "backslashreplace")}") = "{self.create_revision}"'

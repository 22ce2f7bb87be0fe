"""Re-exports :mod:`distlock._servers.etcd` (one implementation for the tests and ``--spawn``)."""

from distlock._servers.etcd import (
    EtcdCluster,
    PartitionableCluster,
    client_ports,
    endpoints,
    etcd_binary,
    etcd_cluster,
    etcd_tls_member,
    etcdctl_binary,
    make_certs,
    partitionable_cluster,
    post,
    start_cluster,
)
from distlock._servers.proc import netns_usable

__all__ = [
    "EtcdCluster",
    "PartitionableCluster",
    "client_ports",
    "endpoints",
    "etcd_binary",
    "etcd_cluster",
    "etcd_tls_member",
    "etcdctl_binary",
    "make_certs",
    "netns_usable",
    "partitionable_cluster",
    "post",
    "start_cluster",
]

#!/usr/bin/env bash
# Installs the servers the test suite starts (Debian packages), only those that are missing.
# The tests start their own processes on free loopback ports; nothing here starts a service.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/local/sbin/$1" ]; }
have redis-server || need+=(redis-server)
have redis-sentinel || need+=(redis-sentinel)
[ -e /usr/share/zookeeper/bin/zkServer.sh ] || [ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
have etcd || need+=(etcd-server)
have etcdctl || need+=(etcd-client)
have mariadbd || have mysqld || need+=(mariadb-server)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
have pgbouncer || need+=(pgbouncer)
[ -e /usr/share/java/curator-recipes.jar ] || need+=(libcurator-recipes-java)
have javac || need+=(default-jdk-headless)
have faketime || need+=(faketime)
have ip || need+=(iproute2)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
  exit 1
fi
echo "installing: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Debian's maintainer scripts try to start the daemons; we start our own on free ports instead.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

#!/usr/bin/env bash
# redis-replicas.sh makes sure the binaries the Redis failover tests need are
# installed: redis-server and redis-cli (masters and replicas) and
# redis-sentinel (Debian's redis-sentinel package). The tests in
# stores/redisstore and integration/redisfaults start their own servers on
# ports 7200-7299 (master, replica replicating through an in-process proxy,
# sentinel) and kill them when they end; this script starts nothing and
# touches no running server. Everything it prints goes to stderr.
set -euo pipefail
log() { echo "redis-replicas: $*" >&2; }
updated=0
need() { # need command package
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2"
  if [ $updated = 0 ]; then apt-get update -qq >&2; updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need redis-server redis-server
need redis-cli redis-tools
need redis-sentinel redis-sentinel

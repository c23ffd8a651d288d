#!/usr/bin/env bash
# backends.sh starts every server the test suite talks to, installing what is
# missing, and prints the environment the tests read (eval "$(scripts/backends.sh)").
#
#   Redis            127.0.0.1:6379            IDEM_REDIS_ADDR
#   Redis Cluster    127.0.0.1:7101-7103       IDEM_REDIS_CLUSTER (3 masters)
#   Valkey 8.1       127.0.0.1:6390            IDEM_VALKEY_ADDR (SET ... IFEQ; Debian 13's
#                                              package, in a debootstrapped root)
#   Valkey Cluster   127.0.0.1:7301-7303       IDEM_VALKEY_CLUSTER (3 masters, the same root)
#                                              IDEM_VALKEY_ROOT: the root, where tests start their own
#   DynamoDB Local   http://127.0.0.1:8765     IDEM_DYNAMODB_ENDPOINT
#   S3 (s3rver)      http://127.0.0.1:8766     IDEM_S3_ENDPOINT (path-style; key/secret S3RVER)
#   PostgreSQL       127.0.0.1:5432 db test    IDEM_POSTGRES_DSN (user postgres, trust on loopback)
#   MariaDB          127.0.0.1:3306 db test    IDEM_MYSQL_DSN (root, empty password)
#   NATS + JetStream 127.0.0.1:4222            IDEM_NATS_URL
#   RabbitMQ         127.0.0.1:5672            IDEM_AMQP_URL (guest/guest)
#
# Progress goes to stderr; only export lines go to stdout.
set -euo pipefail

CACHE=${IDEM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idem}
RUN=${IDEM_RUN_DIR:-/tmp/idem-backends}
# One set-up at a time: two runs at once would each start (or install)
# the same servers.
mkdir -p "$RUN"
# The servers it starts inherit the lock's descriptor: unlocking it on
# exit (which unlocks it for them too) keeps them from holding it.
exec 9>"$RUN/.lock"
flock 9
trap 'flock -u 9' EXIT
mkdir -p "$CACHE" "$RUN"
log() { echo "backends: $*" >&2; }
# Any step that fails stops the script with one line naming it.
trap 'log "FAILED (line $LINENO): $BASH_COMMAND"' ERR

apt_updated=0
need_pkg() { # need_pkg command package
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2"
  if [ $apt_updated = 0 ]; then apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}

wait_port() { # wait_port host port seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    (echo >"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  log "nothing listens on $1:$2 after $3s"; return 1
}

# --- Redis (standalone) -------------------------------------------------
need_pkg redis-server redis-server
need_pkg redis-cli redis-tools
"$(dirname "$0")/redis-replicas.sh" >&2 # redis-sentinel for the failover tests
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  log "starting redis on 6379"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log >&2
  wait_port 127.0.0.1 6379 10
fi

# --- Redis Cluster (3 masters, no replicas) ------------------------------
# cluster_up LABEL START PORT...: starts each node that does not answer
# (START PORT starts one, cluster-enabled, on 127.0.0.1:PORT) and makes
# the nodes one cluster of masters unless it is already ok.
cluster_up() {
  local label=$1 start=$2 p i
  shift 2
  for p in "$@"; do
    if ! redis-cli -p "$p" ping >/dev/null 2>&1; then
      log "starting $label node on $p"
      "$start" "$p"
      wait_port 127.0.0.1 "$p" 10
    fi
  done
  if ! redis-cli -p "$1" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
    if [ "$(redis-cli -p "$1" cluster info 2>/dev/null | grep cluster_known_nodes | tr -dc 0-9)" != "$#" ]; then
      log "creating $label"
      for p in "$@"; do redis-cli -p "$p" flushall >/dev/null 2>&1 || true; redis-cli -p "$p" cluster reset hard >/dev/null 2>&1 || true; done
      redis-cli --cluster create $(printf '127.0.0.1:%s ' "$@") --cluster-replicas 0 --cluster-yes >&2
    fi
    for ((i = 0; i < 100; i++)); do
      redis-cli -p "$1" cluster info | grep -q 'cluster_state:ok' && break
      sleep 0.1
    done
    redis-cli -p "$1" cluster info | grep -q 'cluster_state:ok' || { log "$label not ok"; exit 1; }
  fi
}
# The flags every cluster node of the tests runs with (after its port).
cluster_flags=(--save "" --appendonly no --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000)
redis_cluster_node() {
  mkdir -p "$RUN/cluster-$1"
  rm -f "$RUN/cluster-$1/nodes.conf"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$1" "${cluster_flags[@]}" \
    --dir "$RUN/cluster-$1" --logfile "$RUN/cluster-$1/redis.log" >&2
}
cluster_up "redis cluster" redis_cluster_node 7101 7102 7103

# --- Valkey 8.1 (a server whose SET has IFEQ) ---------------------------
# Debian 12's Redis is 7.0, whose SET has no IFEQ; Debian 13 (trixie)
# packages Valkey 8.1. Its binaries need trixie's libc, so the package is
# installed into a minimal trixie root made with debootstrap (about 25 s
# and 100 MB, once), and the server runs chrooted there, on loopback.
VALKEY_PORT=6390
VALKEY_ROOT=${IDEM_VALKEY_ROOT:-/var/lib/idem-trixie}
valkey_root() { # installs valkey-server into VALKEY_ROOT, once
  [ -x "$VALKEY_ROOT/usr/bin/valkey-server" ] && return 0
  need_pkg debootstrap debootstrap
  log "installing valkey-server from Debian trixie into $VALKEY_ROOT"
  umount "$VALKEY_ROOT/proc" 2>/dev/null || true # left mounted by an interrupted debootstrap
  rm -rf "$VALKEY_ROOT"
  debootstrap --variant=minbase --include=valkey-server trixie "$VALKEY_ROOT" \
    http://deb.debian.org/debian >"$RUN/debootstrap.log" 2>&1 ||
    { tail -20 "$RUN/debootstrap.log" >&2; exit 1; }
}
if ! redis-cli -p "$VALKEY_PORT" ping >/dev/null 2>&1; then
  valkey_root
  log "starting valkey on $VALKEY_PORT"
  chroot "$VALKEY_ROOT" valkey-server --daemonize yes --bind 127.0.0.1 --port "$VALKEY_PORT" \
    --save "" --appendonly no --logfile /tmp/valkey.log >&2
  wait_port 127.0.0.1 "$VALKEY_PORT" 10
fi
valkey_cluster_node() {
  valkey_root
  mkdir -p "$VALKEY_ROOT/var/lib/idem-cluster-$1"
  rm -f "$VALKEY_ROOT/var/lib/idem-cluster-$1/nodes.conf"
  chroot "$VALKEY_ROOT" valkey-server --daemonize yes --bind 127.0.0.1 --port "$1" "${cluster_flags[@]}" \
    --dir "/var/lib/idem-cluster-$1" --logfile "/var/lib/idem-cluster-$1/valkey.log" >&2
}
cluster_up "valkey cluster" valkey_cluster_node 7301 7302 7303

# --- DynamoDB Local ------------------------------------------------------
DDB_PKG=amplify-dynamodb-simulator@2.9.30   # ships DynamoDBLocal.jar 1.25.1
DDB_PORT=8765
emulator="$CACHE/dynamodb/package/emulator"
if [ ! -f "$emulator/DynamoDBLocal.jar" ]; then
  need_pkg java default-jre-headless
  need_pkg npm npm
  log "fetching $DDB_PKG"
  rm -rf "$CACHE/dynamodb"; mkdir -p "$CACHE/dynamodb"
  (cd "$CACHE/dynamodb" && npm pack --silent "$DDB_PKG" >&2 && tar xzf ./*.tgz && rm -f ./*.tgz)
fi
if ! (echo >"/dev/tcp/127.0.0.1/$DDB_PORT") 2>/dev/null; then
  log "starting DynamoDB Local on $DDB_PORT"
  (cd "$RUN" && exec nohup java -Djava.library.path="$emulator/DynamoDBLocal_lib" \
    -jar "$emulator/DynamoDBLocal.jar" -inMemory -port "$DDB_PORT" \
    >"$RUN/dynamodb.log" 2>&1 &)
  wait_port 127.0.0.1 "$DDB_PORT" 60
fi

# --- S3-compatible server (s3rver, Node) ---------------------------------
S3_PKG=s3rver@3.7.1
S3_PORT=8766
s3rver_bin="$CACHE/s3rver/node_modules/.bin/s3rver"
if [ ! -x "$s3rver_bin" ]; then
  need_pkg node nodejs
  need_pkg npm npm
  log "installing $S3_PKG"
  rm -rf "$CACHE/s3rver"; mkdir -p "$CACHE/s3rver"
  npm install --silent --no-audit --no-fund --prefix "$CACHE/s3rver" "$S3_PKG" >&2
fi
if ! (echo >"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null; then
  log "starting s3rver on $S3_PORT"
  rm -rf "$RUN/s3"; mkdir -p "$RUN/s3"
  (cd "$RUN" && exec nohup node "$s3rver_bin" -d "$RUN/s3" -a 127.0.0.1 -p "$S3_PORT" \
    --silent --no-vhost-buckets >"$RUN/s3rver.log" 2>&1 &)
  wait_port 127.0.0.1 "$S3_PORT" 30
fi

# --- PostgreSQL (loopback, trust, database "test") ------------------------
if [ -z "$(ls /etc/postgresql 2>/dev/null)" ] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
  log "installing postgresql"
  if [ $apt_updated = 0 ]; then apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
pg_ver=$(ls /etc/postgresql | sort -n | tail -1)
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  hba=/etc/postgresql/$pg_ver/main/pg_hba.conf
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    log "trusting loopback connections in $hba"
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  log "starting postgresql $pg_ver"
  pg_ctlcluster --skip-systemctl-redirect "$pg_ver" main start >&2
  wait_port 127.0.0.1 5432 30
  for ((i = 0; i < 100; i++)); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.1; done
fi
if ! psql -h 127.0.0.1 -U postgres -d test -tAc 'select 1' >/dev/null 2>&1; then
  log "creating postgresql database test"
  psql -h 127.0.0.1 -U postgres -d postgres -c 'CREATE DATABASE test' >&2
fi

# PgBouncer, which sqlstore's pooler test starts itself in transaction mode.
need_pkg pgbouncer pgbouncer

# --- MariaDB (loopback, root without password, database "test") -----------
if [ ! -x /usr/sbin/mariadbd ]; then
  log "installing mariadb-server"
  if [ $apt_updated = 0 ]; then apt-get update -qq >&2; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >&2
fi
if ! mariadb-admin -h 127.0.0.1 -P 3306 -uroot --connect-timeout=2 ping >/dev/null 2>&1; then
  log "starting mariadb"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >&2
  wait_port 127.0.0.1 3306 60
fi
if ! mariadb -h 127.0.0.1 -P 3306 -uroot -e 'USE test' >/dev/null 2>&1; then
  log "granting root on loopback and creating mariadb database test"
  mariadb -uroot <<'SQL' >&2
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS test;
SQL
fi

# --- NATS with JetStream (Debian's nats-server) ----------------------------
need_pkg nats-server nats-server
if ! (echo >"/dev/tcp/127.0.0.1/4222") 2>/dev/null; then
  log "starting nats-server with JetStream on 4222"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log >&2
  wait_port 127.0.0.1 4222 30
fi

# --- RabbitMQ (Debian's rabbitmq-server, guest/guest on loopback) ----------
need_pkg rabbitmq-server rabbitmq-server
if ! (echo >"/dev/tcp/127.0.0.1/5672") 2>/dev/null; then
  log "starting rabbitmq-server on 5672"
  rabbitmq-server -detached >&2
  wait_port 127.0.0.1 5672 120
fi

cat <<ENV
export IDEM_REDIS_ADDR=127.0.0.1:6379
export IDEM_REDIS_CLUSTER=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
export IDEM_VALKEY_ADDR=127.0.0.1:$VALKEY_PORT
export IDEM_VALKEY_CLUSTER=127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303
export IDEM_VALKEY_ROOT=$VALKEY_ROOT
export IDEM_DYNAMODB_ENDPOINT=http://127.0.0.1:$DDB_PORT
export IDEM_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
export IDEM_POSTGRES_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
export IDEM_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test'
export IDEM_NATS_URL=nats://127.0.0.1:4222
export IDEM_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/
ENV

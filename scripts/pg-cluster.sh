#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests (issue 29), as crates/receiver/src/db/pg_cluster.rs
# makes one for the receiver's unit tests: Debian's server (`postgresql`, which
# scripts/test-deps.sh installs), `initdb` in DIR, listening only on a unix socket in DIR
# (no TCP), trust authentication, fsync off. `initdb` refuses root, so under root the cluster
# runs as `nobody` (DIR is given to it).
#
#   scripts/pg-cluster.sh start DIR   starts it; prints the admin database's URL on stdout:
#                                     postgres://sp@/postgres?host=DIR
#   scripts/pg-cluster.sh stop DIR    stops it at once (pg_ctl -m immediate) and removes DIR
#
# Exit status: 0 done, 2 PostgreSQL's server is not installed, 1 anything else (said on stderr).
set -uo pipefail
me=scripts/pg-cluster.sh
die() { printf '%s: %s\n' "$me" "$*" >&2; exit 1; }
usage() { printf 'usage: %s start DIR | stop DIR\n' "$me" >&2; exit 1; }

[ $# -eq 2 ] || usage
cmd=$1
dir=$2
# The file that says DIR is a cluster this script made (so `stop` never removes anything else).
marker=.sp-pg-cluster

# The newest /usr/lib/postgresql/<version>/bin holding the server's programs.
server_bin() {
    local best= best_v=-1 d v
    for d in /usr/lib/postgresql/*/bin; do
        v=${d#/usr/lib/postgresql/}
        v=${v%/bin}
        [[ $v =~ ^[0-9]+$ ]] || continue
        [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] || continue
        if [ "$v" -gt "$best_v" ]; then best=$d; best_v=$v; fi
    done
    [ -n "$best" ] && printf '%s\n' "$best"
}

bin=$(server_bin) || {
    printf '%s: PostgreSQL'"'"'s server is not installed (no /usr/lib/postgresql/<version>/bin/initdb);\n' "$me" >&2
    printf '%s:   install Debian'"'"'s package: apt-get install postgresql (scripts/test-deps.sh does)\n' "$me" >&2
    exit 2
}

as_nobody=
[ "$(id -u)" -eq 0 ] && as_nobody=1
# The server's program NAME with its arguments, as nobody under root.
server() {
    local prog=$bin/$1
    shift
    if [ -n "$as_nobody" ]; then
        runuser -u nobody -- "$prog" "$@"
    else
        "$prog" "$@"
    fi
}

case "$cmd" in
start)
    mkdir -p "$dir" || die "cannot make $dir"
    dir=$(cd "$dir" && pwd) || die "cannot enter $dir"
    [ -z "$(ls -A "$dir")" ] || die "$dir is not empty: give a new or empty folder"
    # A unix socket's path is at most 107 bytes: DIR/.s.PGSQL.5432 must fit.
    [ "${#dir}" -le 90 ] || die "$dir is too long for a unix socket's path (at most 90 characters)"
    if [ -n "$as_nobody" ]; then
        command -v runuser >/dev/null 2>&1 || die "running as root, and runuser (util-linux) is missing: initdb refuses root"
        chown nobody: "$dir" || die "cannot give $dir to nobody"
        runuser -u nobody -- test -w "$dir" \
            || die "nobody cannot write $dir (a folder above it is closed to others): use one under /tmp"
    fi
    touch "$dir/$marker" || die "cannot write into $dir"
    if ! server initdb -U sp --auth=trust -E UTF8 --no-locale -N -D "$dir/data" >"$dir/initdb.log" 2>&1; then
        cat "$dir/initdb.log" >&2
        die "initdb failed (above)"
    fi
    # Many test receivers, each with its own pool, share one cluster: room for their connections.
    opts="-c listen_addresses='' -k $dir -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=300"
    if ! server pg_ctl -w -t 60 -D "$dir/data" -l "$dir/log" -o "$opts" start >/dev/null 2>&1; then
        cat "$dir/log" >&2 2>/dev/null
        die "pg_ctl start failed (its log is above)"
    fi
    printf 'postgres://sp@/postgres?host=%s\n' "$dir"
    ;;
stop)
    [ -d "$dir" ] || exit 0
    [ -e "$dir/$marker" ] || die "$dir was not made by '$me start': not touching it"
    if [ -f "$dir/data/postmaster.pid" ]; then
        server pg_ctl -m immediate -w -D "$dir/data" stop >/dev/null 2>&1 \
            || die "pg_ctl stop failed (its log: $dir/log)"
    fi
    rm -rf "$dir" || die "cannot remove $dir"
    ;;
*) usage ;;
esac

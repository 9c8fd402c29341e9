#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests (issue 29): Debian's server (`postgresql`, which
# scripts/test-deps.sh installs), `initdb` in DIR, listening only on a unix socket in DIR
# (no TCP), trust authentication, fsync off. `initdb` refuses root, so under root the cluster
# runs as `nobody` (DIR is given to it).
#
# The one implementation: scripts/test.sh, crates/sender/tests/two_receivers.rs, the
# receiver_load bench's docs and the receiver's unit tests (crates/receiver/src/db/pg_cluster.rs,
# a thin caller that makes the TLS variant's certificates) all start a cluster here, and the
# build scripts (scripts/has_postgres.rs) ask `bin` whether the PostgreSQL tests can run. Bash
# rather than Rust because the shell callers (test.sh, a person starting a cluster for the
# bench) need no build, and a test binary can run a script as easily as a program.
#
#   scripts/pg-cluster.sh start DIR   starts it; prints the admin database's URL on stdout:
#                                     postgres://sp@/postgres?host=DIR
#   scripts/pg-cluster.sh start DIR --tls PORT CERT KEY HBA
#                                     also listens on 127.0.0.1:PORT with ssl=on, serving the
#                                     certificate CERT with its key KEY (PEM files, copied into
#                                     DIR); HBA says what TCP lets in: `host` (TLS or plain) or
#                                     `hostssl` (TLS only). The URL printed names the port.
#   scripts/pg-cluster.sh stop DIR    stops it at once (pg_ctl -m immediate) and removes DIR
#   scripts/pg-cluster.sh bin         prints the server's programs' folder (the newest
#                                     /usr/lib/postgresql/<version>/bin)
#
# Exit status: 0 done, 2 PostgreSQL's server is not installed, 1 anything else (said on stderr).
set -uo pipefail
me=scripts/pg-cluster.sh
die() { printf '%s: %s\n' "$me" "$*" >&2; exit 1; }

usage() { printf 'usage: %s start DIR [--tls PORT CERT KEY host|hostssl] | stop DIR | bin\n' "$me" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
tls_port= tls_cert= tls_key= tls_hba=
case "$cmd" in
start)
    if [ $# -eq 7 ] && [ "$3" = --tls ]; then
        tls_port=$4 tls_cert=$5 tls_key=$6 tls_hba=$7
        [[ $tls_port =~ ^[0-9]+$ ]] || usage
        [ "$tls_hba" = host ] || [ "$tls_hba" = hostssl ] || usage
        [ -r "$tls_cert" ] && [ -r "$tls_key" ] || die "cannot read $tls_cert and $tls_key"
    else
        [ $# -eq 2 ] || usage
    fi
    ;;
stop) [ $# -eq 2 ] || usage ;;
bin) [ $# -eq 1 ] || usage ;;
esac
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

[ "$cmd" = bin ] && { printf '%s\n' "$bin"; exit 0; }

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
    opts="-k $dir -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=300"
    url="postgres://sp@/postgres?host=$dir"
    if [ -z "$tls_port" ]; then
        opts="-c listen_addresses='' $opts"
    else
        # The server reads its key only when no one else can, and it owns it.
        cp "$tls_cert" "$dir/server.crt" && cp "$tls_key" "$dir/server.key" \
            && chmod 600 "$dir/server.key" || die "cannot copy the certificate and key into $dir"
        if [ -n "$as_nobody" ]; then
            chown nobody: "$dir/server.crt" "$dir/server.key" || die "cannot give the key to nobody"
        fi
        printf 'local all all trust\n%s all all 127.0.0.1/32 trust\n' "$tls_hba" >"$dir/data/pg_hba.conf" \
            || die "cannot write pg_hba.conf"
        opts="-c listen_addresses=127.0.0.1 -p $tls_port $opts -c ssl=on"
        opts="$opts -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key"
        url="$url&port=$tls_port"
    fi
    if ! server pg_ctl -w -t 60 -D "$dir/data" -l "$dir/log" -o "$opts" start >/dev/null 2>&1; then
        cat "$dir/log" >&2 2>/dev/null
        die "pg_ctl start failed (its log is above)"
    fi
    printf '%s\n' "$url"
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
esac

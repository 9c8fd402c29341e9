#!/usr/bin/env bash
# The README's test command. Installs what the tests need (scripts/test-deps.sh: Debian
# packages as root or with password-less sudo, the pinned npm packages into this folder,
# nothing into your HOME), builds the release binaries the real-agent suite drives, runs
# every test binary (cargo test --no-fail-fast, so one failing binary does not hide the
# others), then the receiver's suite again on a throwaway PostgreSQL (scripts/pg-cluster.sh;
# only when no cargo arguments were given, or with SP_TEST_PG=1; skipped saying so when
# PostgreSQL is not installed, failed when CI is set), and ends with one line for both:
#
#   N passed, M failed, K skipped
#
# It exits 0 only when every test binary ran to its end and nothing failed.
#
#   scripts/test.sh [CARGO TEST ARGS] [-- TEST ARGS]    e.g. scripts/test.sh --test harnesses
#
# The reference's fixtures (../shared/peer-data, or $SP_PEER_DATA) are an extra
# cross-check: the `peer_*` tests run when they are present and are counted as skipped when
# not. SP_REQUIRE_PEER_DATA=1 (CI) runs them anyway, so their absence fails.
# SP_TEST_NO_DEPS=1 skips the install step.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
start=$(date +%s)
say() { printf 'scripts/test.sh: %s\n' "$*"; }
elapsed() { echo "$(( $(date +%s) - start )) s"; }
# CI set to anything but empty, 0 or false (as crates/testkit/src/needs.rs reads it).
ci_set() { case "${CI:-}" in ""|0|false) return 1 ;; *) return 0 ;; esac; }

deps_note=
if [ -z "${SP_TEST_NO_DEPS:-}" ]; then
    say "installing what the tests need (scripts/test-deps.sh)"
    bash scripts/test-deps.sh || deps_note="scripts/test-deps.sh could not install everything (see its NOT INSTALLED line above); the suites that need it fail"
    say "dependencies done after $(elapsed)"
fi
# Node.js 22 from .deps/ when the system's is older (scripts/deps-lib.sh).
[ -d "$here/.deps/bin" ] && export PATH="$here/.deps/bin:$PATH"

say "building every binary, debug for the suites and release for the real-agent suite (cargo build [--release] --locked --bins)"
if ! cargo build --locked --bins || ! cargo build --release --locked --bins; then
    say "the release build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# Options for every test binary (after the `--` of cargo test).
test_args=()
cargo_args=()
seen_sep=
for a in "$@"; do
    if [ -z "$seen_sep" ] && [ "$a" = "--" ]; then seen_sep=1; continue; fi
    if [ -n "$seen_sep" ]; then test_args+=("$a"); else cargo_args+=("$a"); fi
done
peer="${SP_PEER_DATA:-$here/../shared/peer-data}"
case "${SP_REQUIRE_PEER_DATA:-}" in
    1|true|yes) say "SP_REQUIRE_PEER_DATA is set: the cross-check tests (peer_*) run against $peer" ;;
    *)
        if [ -d "$peer" ]; then
            say "the reference's fixtures are at $peer: the cross-check tests (peer_*) run too"
        else
            say "no reference fixtures at $peer: the cross-check tests (peer_*) are skipped"
            test_args+=(--skip peer_)
        fi
        ;;
esac

# A test that needs an outside tool (caddy, node, the pinned CLIs, the release build) which
# is missing fails when CI is set and otherwise prints `skipped: <test>: needs <tool>`
# (crates/testkit/src/needs.rs); those are counted as skipped below, not passed.
command -v caddy >/dev/null 2>&1 || say "caddy is not installed: the TLS proxy test will say it skipped (it fails when CI is set)"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
say "cargo test --locked --no-fail-fast ${cargo_args[*]} -- ${test_args[*]}"
cargo test --locked --no-fail-fast "${cargo_args[@]}" -- "${test_args[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# One libtest summary per test binary: the last `test result:` line before the next binary
# starts (a failed test's captured output may hold an inner one, as the real-agent suite's
# re-run scenarios do). Prints: passed failed skipped binaries unfinished needs_skipped.
tally() {
    local counts needs_skipped p f s b u
    counts=$(awk '
    function flush() {
        if (running) {
            if (result == "") unfinished++
            else {
                binaries++
                if (match(result, /[0-9]+ passed/)) passed += substr(result, RSTART, RLENGTH) + 0
                if (match(result, /[0-9]+ failed/)) failed += substr(result, RSTART, RLENGTH) + 0
                if (match(result, /[0-9]+ ignored/)) skipped += substr(result, RSTART, RLENGTH) + 0
                if (match(result, /[0-9]+ filtered out/)) skipped += substr(result, RSTART, RLENGTH) + 0
            }
        }
        running = 0; result = ""
    }
    /^ *(Running|Doc-tests) / { flush(); running = 1; next }
    /^test result: / { result = $0 }
    END { flush(); printf "%d %d %d %d %d\n", passed, failed, skipped, binaries, unfinished }
' "$1")
    # Tests that returned early for a missing tool passed as far as libtest knows: count
    # them as skipped, once each.
    needs_skipped=$(grep -oE 'skipped: [A-Za-z0-9_:]+: needs ' "$1" | sort -u | wc -l)
    read -r p f s b u <<<"$counts"
    echo "$((p - needs_skipped)) $f $((s + needs_skipped)) $b $u $needs_skipped"
}
read -r passed failed skipped binaries unfinished needs_skipped < <(tally "$log")

echo
say "$binaries test binaries ran to their end in $(elapsed)"
if [ "$needs_skipped" -gt 0 ]; then
    say "$needs_skipped tests skipped for a missing tool (set CI=1 to make that a failure):"
    grep -oE 'skipped: [A-Za-z0-9_:]+: needs .*' "$log" | sort -u | sed 's/^/  /'
fi
if [ "$unfinished" -gt 0 ]; then
    say "$unfinished test binaries ended without a result (crashed or did not build); counted as failed"
    failed=$((failed + unfinished))
fi
[ -z "$deps_note" ] || say "$deps_note"
if [ "$binaries" -eq 0 ]; then
    say "no test ran (cargo test exited $status)"
    failed=$((failed + 1))
fi
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    say "cargo test exited $status"
    failed=1
fi

# The second pass, the receiver's suite on PostgreSQL (issue 29): the receiver-centred test
# binaries again, each in-process test receiver on a fresh database of a throwaway cluster
# (SP_TEST_RECEIVER_PG, read by spreceiver::Receiver::start in the `testing` build) instead
# of an in-memory SQLite.
# It runs when no cargo arguments were given (the whole suite), or with SP_TEST_PG=1.
if [ "${#cargo_args[@]}" -eq 0 ] || [ "${SP_TEST_PG:-}" = 1 ]; then
    pg_start=$(date +%s)
    pg_log="$(mktemp)"
    pg_dir="$(mktemp -d)"
    # The cluster is stopped and its folder removed however this script ends.
    trap 'rm -f "$log" "$pg_log"; bash "$here/scripts/pg-cluster.sh" stop "$pg_dir" >/dev/null 2>&1 || rm -rf "$pg_dir"' EXIT
    echo
    say "the receiver's suite on PostgreSQL: starting a throwaway cluster (scripts/pg-cluster.sh start $pg_dir)"
    pg_url=$(bash scripts/pg-cluster.sh start "$pg_dir")
    pg_status=$?
    if [ "$pg_status" -eq 2 ] && ! ci_set; then
        say "PostgreSQL is not installed (apt-get install postgresql; scripts/test-deps.sh does): the receiver's suite on PostgreSQL is skipped (it fails when CI is set)"
        skipped=$((skipped + 1))
    elif [ "$pg_status" -ne 0 ]; then
        say "the receiver's suite on PostgreSQL could not start its cluster (above); counted as failed"
        failed=$((failed + 1))
    else
        say "SP_TEST_RECEIVER_PG=$pg_url"
        pg_runs=(
            "-p sessionpipe-receiver --features testing"
            "-p sessionpipe-control --test receiver_signed --test transport --test reliability_faults --test signed_sync"
        )
        pg_failed_runs=0
        for run in "${pg_runs[@]}"; do
            say "SP_TEST_RECEIVER_PG=... cargo test --locked --no-fail-fast $run -- ${test_args[*]}"
            # shellcheck disable=SC2086 # each run is a list of cargo arguments
            SP_TEST_RECEIVER_PG="$pg_url" cargo test --locked --no-fail-fast $run -- "${test_args[@]}" 2>&1 | tee -a "$pg_log"
            [ "${PIPESTATUS[0]}" -eq 0 ] || pg_failed_runs=$((pg_failed_runs + 1))
        done
        read -r pg_passed pg_failed pg_skipped pg_binaries pg_unfinished pg_needs < <(tally "$pg_log")
        echo
        say "on PostgreSQL: $pg_binaries test binaries ran to their end in $(( $(date +%s) - pg_start )) s: $pg_passed passed, $pg_failed failed, $pg_skipped skipped"
        if [ "$pg_needs" -gt 0 ]; then
            grep -oE 'skipped: [A-Za-z0-9_:]+: needs .*' "$pg_log" | sort -u | sed 's/^/  /'
        fi
        if [ "$pg_unfinished" -gt 0 ]; then
            say "on PostgreSQL: $pg_unfinished test binaries ended without a result (crashed or did not build); counted as failed"
            pg_failed=$((pg_failed + pg_unfinished))
        fi
        if [ "$pg_binaries" -eq 0 ] || { [ "$pg_failed_runs" -gt 0 ] && [ "$pg_failed" -eq 0 ]; }; then
            say "on PostgreSQL: cargo test failed ($pg_failed_runs of ${#pg_runs[@]} runs) with no failing test counted; counted as failed"
            pg_failed=1
        fi
        passed=$((passed + pg_passed))
        failed=$((failed + pg_failed))
        skipped=$((skipped + pg_skipped))
    fi
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The README's test command. Installs what the tests need (scripts/test-deps.sh: Debian
# packages as root or with password-less sudo, the pinned npm packages into this folder,
# nothing into your HOME), builds the release binaries the real-agent suite drives, runs
# every test binary (cargo test --no-fail-fast, so one failing binary does not hide the
# others), and ends with one line:
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
# (crates/sender/tests/common/needs.rs); those are counted as skipped below, not passed.
command -v caddy >/dev/null 2>&1 || say "caddy is not installed: the TLS proxy test will say it skipped (it fails when CI is set)"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
say "cargo test --locked --no-fail-fast ${cargo_args[*]} -- ${test_args[*]}"
cargo test --locked --no-fail-fast "${cargo_args[@]}" -- "${test_args[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# One libtest summary per test binary: the last `test result:` line before the next binary
# starts (a failed test's captured output may hold an inner one, as the real-agent suite's
# re-run scenarios do).
read -r passed failed skipped binaries unfinished < <(awk '
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
' "$log")

# Tests that returned early for a missing tool passed as far as libtest knows: count them
# as skipped, once each.
needs_skipped=$(grep -oE 'skipped: [A-Za-z0-9_:]+: needs ' "$log" | sort -u | wc -l)
if [ "$needs_skipped" -gt 0 ]; then
    passed=$((passed - needs_skipped))
    skipped=$((skipped + needs_skipped))
fi

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
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The real-agent suite in one command (issue 8): Claude Code, Codex, OpenCode, Gemini CLI and
# Copilot CLI, at the versions pinned in e2e/package-lock.json, driven offline by our release
# binaries.
#
#   e2e/run.sh [FILTER]        FILTER picks scenarios by name, e.g. `e2e/run.sh codex`
#
# It installs the pinned CLIs if needed (scripts/e2e-deps.sh), builds the release binaries
# (cargo build --release --locked --bins), runs tests/real_agents.rs one scenario at a time,
# each in its own loopback-only network namespace (root is needed for that), and ends with
# one line `N passed, M failed`. SP_E2E_KEEP=1 keeps every scenario's folder under /tmp.
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
start=$(date +%s)

"$here/scripts/e2e-deps.sh" || { echo "e2e/run.sh: scripts/e2e-deps.sh failed" >&2; exit 1; }
# Node.js 22 from .deps/ when the system's is older (scripts/deps-lib.sh).
[ -d "$here/.deps/bin" ] && export PATH="$here/.deps/bin:$PATH"
cargo build --release --locked --bins || { echo "e2e/run.sh: the release build failed" >&2; exit 1; }

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --locked --test real_agents -- --test-threads=1 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# The outer libtest summary is the last "test result:" line (a failed scenario's output
# carries its inner one before it).
summary="$(grep -E '^test result: ' "$log" | tail -n 1)"
passed="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")"
failed="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$summary")"
echo "e2e/run.sh: $(( $(date +%s) - start )) s in all"
if [ -z "$passed" ] || [ -z "$failed" ]; then
    echo "e2e/run.sh: the suite did not run to its end (exit $status)" >&2
    exit 1
fi
echo "$passed passed, $failed failed"
exit "$status"

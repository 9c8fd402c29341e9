#!/usr/bin/env bash
# Runs issue 16's sp-acp scenarios against Harn (harn-cli 0.10.185 from crates.io, on its own
# offline `mock` provider): tests/acp_agents.rs's ignored test
# harn_through_sp_acp_session_remote_allow_idle_prompt_cancel_editor_first_steer_interrupt.
#
# Not in CI: harn-cli's debug build takes about 30 min on two cores. It is built once into
# HARN_ROOT (default .deps/harn; bin/harn there) and reused. Like the other real-agent
# scenarios it runs as root, in a loopback-only network namespace (unshare, ip, python3).
#
#   scripts/harn-acp.sh            # build harn-cli if missing, then run the scenario
#   SP_HARN_BIN=/path/to/harn scripts/harn-acp.sh   # use a harn you already have
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
version=0.10.185
root="${HARN_ROOT:-$here/.deps/harn}"
bin="${SP_HARN_BIN:-$root/bin/harn}"

if [ ! -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -q "$version"; then
    echo "harn-acp: installing harn-cli $version into $root (debug build, ~30 min on 2 cores)" >&2
    mkdir -p "$root"
    start=$(date +%s)
    nice cargo install --locked harn-cli --version "$version" --debug --root "$root"
    echo "harn-acp: harn-cli built in $(( $(date +%s) - start )) s" >&2
    bin="$root/bin/harn"
fi
"$bin" --version

cd "$here"
# The scenario refuses stale binaries: build sp-acp, sp-sync and sp-receiver first.
cargo build --release --locked --bins
SP_HARN_BIN="$bin" exec cargo test --release --locked --test acp_agents harn -- --ignored --nocapture

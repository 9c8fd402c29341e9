# Shared by scripts/test-deps.sh and scripts/e2e-deps.sh (sourced, not run).
#
# Nothing here touches the user's HOME or config: npm and the programs it installs run with
# HOME, XDG_* and npm's cache inside <repo>/.deps/ (git-ignored), and everything npm installs
# goes into the repository (crates/sender/tests/browser/node_modules, e2e/node_modules, .deps/node).

deps_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps_dir="$deps_root/.deps"
# Node.js for the test programs when the system's is older than 22 (Claude Code 2.1.332 asks
# for 22): this exact build, from the npm registry, into .deps/node; .deps/bin goes first
# on PATH (scripts/test.sh and e2e/run.sh put it there).
deps_node_version=22.23.5
deps_missing=()
# Where the system's files are: / (a test points it at a folder of its own).
deps_sysroot=${SP_DEPS_SYSROOT:-}

deps_say() { printf '%s: %s\n' "${deps_me:-deps}" "$*"; }

# Runs a command with HOME, XDG_* and npm's cache inside .deps/, so no tool writes into the
# user's own HOME (npm's cache and update check, a CLI's first-run config, ...). npm still
# reads the user's own ~/.npmrc (registry, proxy, CA file), and never writes it.
deps_user_npmrc=${npm_config_userconfig:-${NPM_CONFIG_USERCONFIG:-${HOME:-/nonexistent}/.npmrc}}
deps_sandboxed() {
    local h="$deps_dir/home"
    mkdir -p "$h" "$deps_dir/npm-cache"
    npm_config_userconfig="$deps_user_npmrc" \
        HOME="$h" XDG_CONFIG_HOME="$h/.config" XDG_DATA_HOME="$h/.local/share" \
        XDG_STATE_HOME="$h/.local/state" XDG_CACHE_HOME="$h/.cache" \
        npm_config_cache="$deps_dir/npm-cache" npm_config_update_notifier=false \
        npm_config_fund=false npm_config_audit=false "$@"
}

# Installs Debian packages for the programs named, when missing: as root with apt-get, else
# with `sudo -n` when that works without a password; otherwise records them in deps_missing.
# Arguments: program:package pairs.
deps_apt() {
    local want=() pair prog pkg
    for pair in "$@"; do
        prog=${pair%%:*} pkg=${pair#*:}
        case "$prog" in
            /*) [ -e "$prog" ] && continue ;;
            *) command -v "$prog" >/dev/null 2>&1 && continue ;;
        esac
        want+=("$pkg")
    done
    [ "${#want[@]}" -gt 0 ] || return 0
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            deps_missing+=("${want[@]}")
            deps_say "cannot install ${want[*]}: not root and no password-less sudo"
            return 0
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        deps_missing+=("${want[@]}")
        deps_say "cannot install ${want[*]}: no apt-get here; install them with your package manager"
        return 0
    fi
    deps_say "installing ${want[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # The tests leave the system as they found it: no service of these packages (caddy's on
    # port 80, postgresql's cluster `main` on 5432) is started or enabled. A policy-rc.d that
    # refuses every start while apt runs (only when there is none already), then the units
    # the install enabled are disabled again and a cluster it made is dropped.
    local policy=$deps_sysroot/usr/sbin/policy-rc.d own_policy= wants_before clusters_before
    wants_before=$(deps_enabled_units)
    clusters_before=$(deps_pg_clusters)
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# scripts/deps-lib.sh: no service starts while the test dependencies install\nexit 101\n' \
            | "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" && own_policy=1
    fi
    if ! { "${sudo[@]}" apt-get update -q && "${sudo[@]}" apt-get install -y -q "${want[@]}"; }; then
        deps_missing+=("${want[@]}")
        deps_say "apt-get could not install ${want[*]}"
    fi
    [ -z "$own_policy" ] || "${sudo[@]}" rm -f "$policy"
    local unit cluster
    for unit in $(comm -13 <(echo "$wants_before") <(deps_enabled_units)); do
        if command -v systemctl >/dev/null 2>&1; then
            "${sudo[@]}" systemctl disable --now "$unit" >/dev/null 2>&1 \
                || "${sudo[@]}" systemctl disable "$unit" >/dev/null 2>&1 || true
        fi
        # Without systemctl (or where it refused): the links that enable it, by hand.
        "${sudo[@]}" find "$deps_sysroot/etc/systemd/system" -path "*.wants/$unit" -type l -delete 2>/dev/null || true
        deps_say "disabled $unit, which installing ${want[*]} enabled (the tests start their own servers)"
    done
    for cluster in $(comm -13 <(echo "$clusters_before") <(deps_pg_clusters)); do
        "${sudo[@]}" pg_dropcluster --stop "${cluster%/*}" "${cluster#*/}" 2>/dev/null \
            && deps_say "dropped the PostgreSQL cluster ${cluster} the package made (the tests make throwaway ones)"
    done
}

# The systemd units enabled through links in /etc/systemd/system/*.wants, sorted.
deps_enabled_units() {
    find "$deps_sysroot/etc/systemd/system" -path '*.wants/*' -type l -printf '%f\n' 2>/dev/null | sort -u
}

# PostgreSQL's clusters as VERSION/NAME (Debian's /etc/postgresql layout), sorted.
deps_pg_clusters() {
    find "$deps_sysroot/etc/postgresql" -mindepth 2 -maxdepth 2 -type d -printf '%P\n' 2>/dev/null | sort -u
}

# The major version of `node` on PATH, or 0.
deps_node_major() {
    node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0
}

# Makes sure `node` on PATH is 22 or later: the system's if it is, else the pinned
# node-linux-<arch> package from npm into .deps/node, linked from .deps/bin (and .deps/bin is
# put first on PATH for the rest of the calling script).
deps_node22() {
    mkdir -p "$deps_dir/bin"
    case ":$PATH:" in *":$deps_dir/bin:"*) ;; *) PATH="$deps_dir/bin:$PATH"; export PATH ;; esac
    command -v node >/dev/null 2>&1 || return 0
    [ "$(deps_node_major)" -ge 22 ] && return 0
    local arch
    case "$(uname -m)" in
        x86_64) arch=x64 ;;
        aarch64|arm64) arch=arm64 ;;
        *) deps_say "node $(node --version) is older than 22 and no Node.js build is known for $(uname -m)"; deps_missing+=("nodejs>=22"); return 0 ;;
    esac
    local pkg="node-linux-$arch" dir="$deps_dir/node"
    if [ ! -x "$dir/node_modules/$pkg/bin/node" ] \
        || [ "$("$dir/node_modules/$pkg/bin/node" --version)" != "v$deps_node_version" ]; then
        deps_say "node $(node --version) is older than 22: installing $pkg@$deps_node_version into .deps/node"
        deps_sandboxed npm install --prefix "$dir" --no-save --no-package-lock "$pkg@$deps_node_version" \
            || { deps_missing+=("nodejs>=22"); return 0; }
    fi
    ln -sf "$dir/node_modules/$pkg/bin/node" "$deps_dir/bin/node"
    hash -r
    deps_say "using $(command -v node) ($(node --version))"
}

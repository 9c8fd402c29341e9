#!/usr/bin/env bash
# Builds sessionpipe-control, installs its binaries, registers the hooks in every installed
# harness and adds the cron line for sp-sync. Never asks anything; safe to run again.
# The JSON merging is done by `sp setup` (Rust, serde_json), not here.
set -eu

usage() {
    cat <<'EOF'
install.sh: build, install and register sessionpipe-control

USAGE:
  ./install.sh               build (cargo build --release --locked), install the binaries
                             into $PREFIX/bin, register the hooks, add the cron line
  ./install.sh --dry-run     show what would change; change nothing (still builds)
  ./install.sh --uninstall   remove exactly what install added: our hooks, the cron line,
                             the binaries (config and state are kept)
OPTIONS:
  --no-build    use binaries already built in $SP_BUILD_DIR (default target/release)
  --no-cron     do not touch the crontab
  -h, --help    this text

ENVIRONMENT:
  PREFIX         install into $PREFIX/bin (default: ~/.local, so ~/.local/bin)
  SP_SKIP_BUILD  set to 1 for --no-build
  SP_BUILD_DIR   where the built binaries are (default: <this folder>/target/release);
                 tests point it at target/debug with SP_SKIP_BUILD=1
  SP_CRONTAB     crontab program to use (tests); a path that does not exist acts as a
                 machine without crontab, which prints a systemd timer instead
  SESSIONPIPE_CONFIG, SESSIONPIPE_STATE_DIR, CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_CONFIG_HOME
                 are honoured as by the binaries (see sp --help)
EOF
}

say() { printf 'install.sh: %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

mode=install
dry_run=
build=1
cron_flag=
case "${SP_SKIP_BUILD:-}" in 1|true|yes) build= ;; esac
for arg in "$@"; do
    case "$arg" in
        --uninstall) mode=uninstall ;;
        --dry-run|-n) dry_run=--dry-run ;;
        --no-build) build= ;;
        --no-cron) cron_flag=--no-cron ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option $arg" ;;
    esac
done

here=$(cd "$(dirname "$0")" && pwd)
[ -n "${HOME:-}" ] || die "HOME is not set"
prefix=${PREFIX:-$HOME/.local}
bin="$prefix/bin"
build_dir=${SP_BUILD_DIR:-$here/target/release}
binaries="sp sp-sync sp-permission sp-stop sp-event"

if [ "$mode" = uninstall ]; then
    # Prefer the installed sp; a fresh build serves when it is gone.
    sp="$bin/sp"
    [ -x "$sp" ] || sp="$build_dir/sp"
    [ -x "$sp" ] || die "no sp in $bin or $build_dir to remove the hooks with; build first (cargo build --release --locked)"
    status=0
    "$sp" setup uninstall $dry_run --bin-dir "$bin" || status=$?
    for b in $binaries; do
        if [ -e "$bin/$b" ]; then
            if [ -n "$dry_run" ]; then say "would remove $bin/$b"; else rm -f "$bin/$b"; say "removed $bin/$b"; fi
        fi
    done
    exit "$status"
fi

if [ -n "$build" ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs), then run this again"
    say "building (cargo build --release --locked); the first build takes a few minutes"
    (cd "$here" && cargo build --release --locked)
    build_dir=$here/target/release
fi
for b in $binaries; do
    [ -x "$build_dir/$b" ] || die "$build_dir/$b is missing: build first, or drop --no-build"
done

if [ -n "$dry_run" ]; then
    for b in $binaries; do
        cmp -s "$build_dir/$b" "$bin/$b" 2>/dev/null || say "would install $bin/$b"
    done
    exec "$build_dir/sp" setup install --dry-run --bin-dir "$bin" $cron_flag
fi

mkdir -p "$bin"
for b in $binaries; do
    if cmp -s "$build_dir/$b" "$bin/$b" 2>/dev/null; then
        continue
    fi
    # Copy then rename: a hook running the old binary keeps it, and nobody sees half a file.
    cp "$build_dir/$b" "$bin/.$b.tmp.$$"
    chmod 755 "$bin/.$b.tmp.$$"
    mv -f "$bin/.$b.tmp.$$" "$bin/$b"
    say "installed $bin/$b"
done

case ":${PATH:-}:" in
    *":$bin:"*) ;;
    *) say "note: $bin is not on your PATH; add it, e.g. in ~/.profile:  export PATH=\"$bin:\$PATH\"" ;;
esac

status=0
"$bin/sp" setup install --bin-dir "$bin" $cron_flag || status=$?
if [ "$status" -eq 0 ]; then
    say "done. Next: sp sink add URL --token-file FILE --control, then sp doctor"
fi
exit "$status"

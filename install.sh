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
  --no-receiver do not start the local sp-receiver nor add a sink for it
  -h, --help    this text

ENVIRONMENT:
  PREFIX         install into $PREFIX/bin (default: ~/.local, so ~/.local/bin)
  SP_SKIP_BUILD  set to 1 for --no-build
  SP_BUILD_DIR   where the built binaries are (default: <this folder>/target/release);
                 tests point it at target/debug with SP_SKIP_BUILD=1
  SP_NO_RECEIVER set to 1 for --no-receiver
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
receiver=1
case "${SP_SKIP_BUILD:-}" in 1|true|yes) build= ;; esac
case "${SP_NO_RECEIVER:-}" in 1|true|yes) receiver= ;; esac
for arg in "$@"; do
    case "$arg" in
        --uninstall) mode=uninstall ;;
        --dry-run|-n) dry_run=--dry-run ;;
        --no-build) build= ;;
        --no-cron) cron_flag=--no-cron ;;
        --no-receiver) receiver= ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option $arg" ;;
    esac
done

here=$(cd "$(dirname "$0")" && pwd)
[ -n "${HOME:-}" ] || die "HOME is not set"
prefix=${PREFIX:-$HOME/.local}
bin="$prefix/bin"
build_dir=${SP_BUILD_DIR:-$here/target/release}
binaries="sp sp-sync sp-permission sp-stop sp-event sp-receiver"

# --- the local receiver (sp-receiver): a working setup out of the box ---------------------
cfg_dir=${XDG_CONFIG_HOME:-$HOME/.config}/sessionpipe
unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
unit=$unit_dir/sp-receiver.service
receiver_port=8787
receiver_log=${XDG_STATE_HOME:-$HOME/.local/state}/sessionpipe/sp-receiver.log

receiver_up() { (exec 3<>"/dev/tcp/127.0.0.1/$receiver_port") 2>/dev/null; }
user_systemd() { command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1; }

receiver_install() {
    "$bin/sp-receiver" --init >/dev/null || { say "sp-receiver --init failed; skipping the local receiver"; return 1; }
    if receiver_up; then
        say "a receiver already answers on 127.0.0.1:$receiver_port"
    elif user_systemd; then
        mkdir -p "$unit_dir"
        printf '[Unit]\nDescription=sessionpipe receiver (page at http://127.0.0.1:%s/)\n[Service]\nExecStart=%s\nRestart=on-failure\nRestartSec=2\n[Install]\nWantedBy=default.target\n' \
            "$receiver_port" "$bin/sp-receiver" >"$unit"
        systemctl --user daemon-reload && systemctl --user enable --now sp-receiver.service
        say "started sp-receiver as the systemd user service sp-receiver.service"
    else
        mkdir -p "$(dirname "$receiver_log")"
        nohup "$bin/sp-receiver" >>"$receiver_log" 2>&1 </dev/null &
        say "started sp-receiver (pid $!); no user service manager here, so start it at login yourself:"
        say "  add '@reboot $bin/sp-receiver >>$receiver_log 2>&1' with crontab -e, or run it from your session startup"
    fi
    i=0
    until receiver_up || [ "$i" -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
    receiver_up || { say "sp-receiver did not come up; see $receiver_log"; return 1; }
    if "$bin/sp" sink list --json 2>/dev/null | grep -q '"name"'; then
        say "you already have sinks; not adding one for the local receiver"
    else
        "$bin/sp" sink add "http://127.0.0.1:$receiver_port" --token-file "$cfg_dir/receiver-token" --control --tier 1 --name local
    fi
    say "answer your agents at: $("$bin/sp-receiver" --login-url)"
}

receiver_uninstall() {
    if [ -f "$unit" ]; then
        if [ -n "$dry_run" ]; then say "would stop and remove $unit"; else
            systemctl --user disable --now sp-receiver.service >/dev/null 2>&1 || true
            rm -f "$unit"; systemctl --user daemon-reload >/dev/null 2>&1 || true
            say "removed $unit"
        fi
    fi
    if command -v pkill >/dev/null 2>&1 && pgrep -f "^$bin/sp-receiver" >/dev/null 2>&1; then
        if [ -n "$dry_run" ]; then say "would stop $bin/sp-receiver"; else pkill -f "^$bin/sp-receiver" || true; say "stopped $bin/sp-receiver"; fi
    fi
    if [ -x "$bin/sp" ] && "$bin/sp" sink list --json 2>/dev/null | grep -q "\"url\": *\"http://127.0.0.1:$receiver_port\""; then
        if [ -n "$dry_run" ]; then say "would remove the sink 'local'"; else "$bin/sp" sink remove local >/dev/null 2>&1 && say "removed the sink 'local'"; fi
    fi
}


if [ "$mode" = uninstall ]; then
    # Prefer the installed sp; a fresh build serves when it is gone.
    sp="$bin/sp"
    [ -x "$sp" ] || sp="$build_dir/sp"
    [ -x "$sp" ] || die "no sp in $bin or $build_dir to remove the hooks with; build first (cargo build --release --locked)"
    status=0
    "$sp" setup uninstall $dry_run --bin-dir "$bin" || status=$?
    [ -z "$receiver" ] || receiver_uninstall
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
if [ -n "$receiver" ]; then
    receiver_install || status=1
fi
if [ "$status" -eq 0 ]; then
    if [ -n "$receiver" ]; then
        say "done. Open the page above to answer your agents; sp doctor checks the whole set-up"
    else
        say "done. Next: sp sink add URL --token-file FILE --control, then sp doctor"
    fi
fi
exit "$status"

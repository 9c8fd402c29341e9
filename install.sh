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
                             into $PREFIX/bin, register the hooks, add the cron line, start
                             the local sp-receiver and add a sink for it
  ./install.sh --dry-run     show every step it would take; change nothing (still builds)
  ./install.sh --uninstall   remove our hooks (a file we created goes, a backup is put back),
                             the cron line, the receiver's service and sink, the binaries;
                             the config, the token files and the state folder are kept (it
                             says which)
OPTIONS:
  --no-build    use binaries already built in $SP_BUILD_DIR (default: cargo's release
                folder, i.e. $CARGO_TARGET_DIR/release or target/release)
  --no-cron     do not touch the crontab
  --no-receiver do not start the local sp-receiver nor add a sink for it
  -h, --help    this text

ENVIRONMENT:
  PREFIX         install into $PREFIX/bin (default: ~/.local, so ~/.local/bin)
  SP_SKIP_BUILD  set to 1 for --no-build
  SP_BUILD_DIR   where the built binaries are (default: the release folder of cargo's
                 target directory: $CARGO_TARGET_DIR/release, else <this folder>/target/release);
                 tests point it at target/debug with SP_SKIP_BUILD=1
  CARGO_TARGET_DIR  honoured as cargo honours it
  SP_NO_RECEIVER set to 1 for --no-receiver
  SP_RECEIVER_PORT  the loopback port of the local receiver (default 8787)
  SP_CRONTAB     crontab program to use (tests); a path that does not exist acts as a
                 machine without crontab, which prints a systemd timer instead
  SP_SYSTEMCTL   systemctl program to use (tests); a path that does not exist acts as a
                 machine without a systemd user manager
  SESSIONPIPE_CONFIG, SESSIONPIPE_STATE_DIR, CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_CONFIG_HOME
                 are honoured as by the binaries (see sp --help)
EOF
}

say() { printf 'install.sh: %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

mode=install
dry_run=
build=1
skipped_by=
cron_flag=
receiver=1
case "${SP_SKIP_BUILD:-}" in 1|true|yes) build= skipped_by="SP_SKIP_BUILD=${SP_SKIP_BUILD}" ;; esac
case "${SP_NO_RECEIVER:-}" in 1|true|yes) receiver= ;; esac
for arg in "$@"; do
    case "$arg" in
        --uninstall) mode=uninstall ;;
        --dry-run|-n) dry_run=--dry-run ;;
        --no-build) build= skipped_by=--no-build ;;
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
binaries="sp sp-sync sp-permission sp-stop sp-event sp-acp sp-receiver"

# Where cargo puts this folder's build: its own answer (which honours CARGO_TARGET_DIR and
# any build.target-dir), else CARGO_TARGET_DIR, else target/ here.
cargo_target_dir() {
    local t=
    if command -v cargo >/dev/null 2>&1; then
        t=$(cd "$here" && cargo metadata --format-version 1 --no-deps --offline 2>/dev/null \
            | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    fi
    if [ -z "$t" ]; then
        t=${CARGO_TARGET_DIR:-target}
        case "$t" in /*) ;; *) t=$here/$t ;; esac
    fi
    printf '%s\n' "$t"
}
if [ -n "${SP_BUILD_DIR:-}" ]; then
    build_dir=$SP_BUILD_DIR
    build_dir_from="SP_BUILD_DIR"
else
    build_dir=$(cargo_target_dir)/release
    build_dir_from="cargo's target directory"
fi

# --- the local receiver (sp-receiver): a working setup out of the box ---------------------
cfg_dir=${XDG_CONFIG_HOME:-$HOME/.config}/sessionpipe
config_file=${SESSIONPIPE_CONFIG:-$cfg_dir/config.json}
state_dir=${SESSIONPIPE_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/sessionpipe}
token_file=${SESSIONPIPE_RECEIVER_TOKEN_FILE:-$cfg_dir/receiver-token}
login_file=${SESSIONPIPE_RECEIVER_LOGIN_TOKEN_FILE:-$cfg_dir/receiver-login-token}
receiver_db=${SESSIONPIPE_RECEIVER_DB:-${XDG_STATE_HOME:-$HOME/.local/state}/sessionpipe/receiver.db}
unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
unit=$unit_dir/sp-receiver.service
receiver_port=${SP_RECEIVER_PORT:-8787}
case $receiver_port in
    '' | *[!0-9]* | 0*) die "SP_RECEIVER_PORT must be a port number from 1 to 65535 (got '$receiver_port'); unset it for 8787" ;;
esac
[ "$receiver_port" -le 65535 ] || die "SP_RECEIVER_PORT must be a port number from 1 to 65535 (got '$receiver_port'); unset it for 8787"
receiver_log=${XDG_STATE_HOME:-$HOME/.local/state}/sessionpipe/sp-receiver.log

receiver_up() { (exec 3<>"/dev/tcp/127.0.0.1/$receiver_port") 2>/dev/null; }
# Whether it serves: GET /healthz answers 200 only when the server and its database answer.
receiver_healthy() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$receiver_port" || exit 1
        printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$receiver_port" >&3
        IFS= read -r -t 2 line <&3 || exit 1
        case $line in "HTTP/1."?" 200"*) exit 0 ;; *) exit 1 ;; esac
    ) 2>/dev/null
}
user_systemd() { local s=${SP_SYSTEMCTL:-systemctl}; command -v "$s" >/dev/null 2>&1 && "$s" --user show-environment >/dev/null 2>&1; }
have_crontab() {
    if [ -n "${SP_CRONTAB:-}" ]; then [ -x "$SP_CRONTAB" ]; else command -v crontab >/dev/null 2>&1; fi
}
# How to start the receiver again after a reboot, where nothing here does it by itself.
receiver_restart_hint() {
    if have_crontab; then
        say "  to start it at boot: add '@reboot $bin/sp-receiver >>$receiver_log 2>&1' with crontab -e"
    else
        say "  after a reboot, start it yourself (e.g. from your login script): $bin/sp-receiver >>$receiver_log 2>&1 &"
    fi
}
has_sinks() { "$1" sink list --json 2>/dev/null | grep -q '"name"'; }
# Whether the receiver on the port is ours: our systemd unit, or our binary running.
receiver_ours() {
    [ -f "$unit" ] && return 0
    command -v pgrep >/dev/null 2>&1 && pgrep -f "^$bin/sp-receiver" >/dev/null 2>&1
}

# --dry-run: every step receiver_install would take.
receiver_plan() {
    local sp=$1
    if [ ! -f "$token_file" ] || [ ! -f "$login_file" ]; then
        say "would create the receiver's token files $token_file and $login_file (sp-receiver --init)"
    fi
    [ -f "$receiver_db" ] || say "would create the receiver's database $receiver_db"
    if receiver_up && ! receiver_ours; then
        say "something else answers on 127.0.0.1:$receiver_port (not $bin/sp-receiver): would start none and add no sink for it"
        return 0
    elif receiver_up; then
        say "sp-receiver already answers on 127.0.0.1:$receiver_port: would start none"
    elif user_systemd; then
        say "would write $unit and start it: systemctl --user enable --now sp-receiver.service"
    else
        say "would start $bin/sp-receiver in the background (log: $receiver_log); no user systemd here, so nothing starts it again after a reboot"
        receiver_restart_hint
    fi
    if has_sinks "$sp"; then
        say "you already have sinks: would add none for the local receiver"
    else
        say "would add the sink 'local' (http://127.0.0.1:$receiver_port, signed control, tier 2: each turn's prompt and answer too, token file $token_file) to $config_file"
    fi
    say "would print the page's login link once, when the receiver is first set up (later: sp-receiver --login-url)"
}

receiver_install() {
    local fresh= added=
    [ -f "$login_file" ] || fresh=1
    "$bin/sp-receiver" --init >/dev/null || { say "sp-receiver --init failed; skipping the local receiver"; return 1; }
    [ -z "$fresh" ] || say "created the receiver's token files $token_file and $login_file"
    if receiver_up; then
        if ! receiver_ours; then
            # Not ours: our token would not open it, so no sink for it either.
            say "something else answers on 127.0.0.1:$receiver_port (not $bin/sp-receiver): not starting the local receiver, nor adding a sink for it"
            say "  free the port and run ./install.sh again, or add your receiver: sp sink add URL --token-file FILE --control"
            return 0
        fi
        say "sp-receiver already answers on 127.0.0.1:$receiver_port"
    elif user_systemd; then
        mkdir -p "$unit_dir"
        # Type=notify: it says READY=1, then pings the watchdog while GET /healthz answers
        # over loopback; a hung server is restarted. Each connection costs a descriptor.
        printf '[Unit]\nDescription=sessionpipe receiver (page at http://localhost:%s/)\n[Service]\nType=notify\nNotifyAccess=main\nExecStart=%s\nRestart=always\nRestartSec=2\nWatchdogSec=30\nLimitNOFILE=65536\n[Install]\nWantedBy=default.target\n' \
            "$receiver_port" "$bin/sp-receiver" >"$unit"
        systemctl --user daemon-reload && systemctl --user enable --now sp-receiver.service
        say "started sp-receiver as the systemd user service sp-receiver.service"
    else
        mkdir -p "$(dirname "$receiver_log")"
        nohup "$bin/sp-receiver" >>"$receiver_log" 2>&1 </dev/null &
        say "started sp-receiver (pid $!) in the background; no user systemd here, so nothing starts it again after a reboot"
        receiver_restart_hint
    fi
    i=0
    until receiver_healthy || [ "$i" -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
    receiver_healthy || { say "sp-receiver did not come up (GET /healthz); see $receiver_log"; return 1; }
    if has_sinks "$bin/sp"; then
        say "you already have sinks; not adding one for the local receiver"
    else
        # Tier 2 (DECISIONS 40): the page on this machine shows each turn's prompt and answer.
        # Signed control (DECISIONS 22): nothing the page sends runs until `sp pair local`
        # enrolls a passkey from this terminal.
        "$bin/sp" sink add "http://127.0.0.1:$receiver_port" --token-file "$token_file" --signed --tier 2 --name local
        added=1
    fi
    if [ -n "$fresh" ] || [ -n "$added" ]; then
        # The link holds the login token: printed when the receiver is first set up only.
        say "answer your agents at: $("$bin/sp-receiver" --login-url)"
        say "(that link logs you in; print it again with: sp-receiver --login-url)"
        if "$bin/sp" control keys --json 2>/dev/null | grep -q '"sink":"local"'; then
            say "a passkey is already enrolled for 'local' (sp control keys): no pairing needed"
        else
            say "then pair once, from this terminal: sp pair local (approve on the page with a passkey; until then nothing the page sends runs)"
        fi
    else
        # localhost, never the IP address: passkeys cannot live on an address.
        say "the receiver's page: http://localhost:$receiver_port/ (your login link: sp-receiver --login-url)"
    fi
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

# The processes running one of $bin's programs that install.sh or the hooks start: sp-sync
# (cron's, `--daemon`, or the hooks' `--while-live`) and the local sp-receiver. Found by
# their executable (/proc/PID/exe, " (deleted)" once the file is gone), so a copy elsewhere
# (another checkout's, a developer's) is never touched. sp-acp is left alone: it carries an
# agent's own stdio and ends with it.
started_by_us() {
    local p exe
    for p in /proc/[0-9]*; do
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        exe=${exe% (deleted)}
        case $exe in "$bin/sp-sync" | "$bin/sp-receiver") echo "${p#/proc/}" ;; esac
    done
}
# Stops them (TERM, then KILL after 5 s): after uninstall nothing keeps running from a
# deleted binary.
stop_started() {
    local pids i=0
    pids=$(started_by_us)
    [ -n "$pids" ] || return 0
    if [ -n "$dry_run" ]; then
        say "would stop what runs from $bin (pid $(echo $pids))"
        return 0
    fi
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    while [ -n "$(started_by_us)" ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    pids=$(started_by_us)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    say "stopped what ran from $bin (sp-sync, sp-receiver)"
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
    # After the binaries are gone, so a hook still finishing cannot start sp-sync again.
    stop_started
    # What stays: yours to keep or remove.
    kept=()
    for f in "$config_file" "$token_file" "$login_file" "$state_dir"; do
        [ -e "$f" ] && kept+=("$f")
    done
    if [ "${#kept[@]}" -gt 0 ]; then
        say "$([ -n "$dry_run" ] && echo "would keep" || echo "kept") (the config, the receiver's tokens, the queue, logs and receiver.db):"
        for f in "${kept[@]}"; do say "  $f"; done
        say "remove them by hand if you want them gone: rm -r ${kept[*]}"
    fi
    exit "$status"
fi

if [ -n "$build" ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs), then run this again"
    if [ -x "$build_dir/sp" ]; then
        say "building (cargo build --release --locked) into $build_dir"
    else
        say "building (cargo build --release --locked) into $build_dir; a first build takes a few minutes"
    fi
    (cd "$here" && cargo build --release --locked) || die "cargo build --release --locked failed"
fi
for b in $binaries; do
    if [ ! -x "$build_dir/$b" ]; then
        if [ -n "$build" ]; then
            die "$build_dir/$b is missing after the build: SP_BUILD_DIR ($build_dir) is not where cargo builds ($(cargo_target_dir)/release); unset it or point it there"
        fi
        die "$build_dir/$b is missing ($build_dir_from; $skipped_by skips the build): build first with cargo build --release --locked, or run without $skipped_by"
    fi
done

if [ -n "$dry_run" ]; then
    for b in $binaries; do
        cmp -s "$build_dir/$b" "$bin/$b" 2>/dev/null || say "would install $bin/$b"
    done
    status=0
    "$build_dir/sp" setup install --dry-run --bin-dir "$bin" $cron_flag || status=$?
    [ -z "$receiver" ] || receiver_plan "$build_dir/sp"
    exit "$status"
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
    [ "$b" != sp-sync ] || sync_replaced=1
done
# A running sp-sync is the old program: the new hooks trust a session's quiet marker, which
# only the new sp-sync removes when it stores a message. Stop it; the next hook (or cron)
# starts the new one, and a stop at any point loses nothing (RELIABILITY.md).
if [ -n "${sync_replaced:-}" ] && command -v pkill >/dev/null 2>&1 \
    && pgrep -f "^$bin/sp-sync( |\$)" >/dev/null 2>&1; then
    pkill -TERM -f "^$bin/sp-sync( |\$)" || true
    say "stopped the running sp-sync (the old version); the next hook starts the new one"
fi

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

//! `sp codex` and `sp doctor` around Codex's app-server socket, without Codex: what happens
//! when Codex is missing and when the socket is not private. (Real Codex under `sp codex`:
//! tests/real_agents/codex_app.rs.)
mod common;
use common::env::*;
use std::os::unix::net::UnixListener;

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn sp_codex_without_codex_says_how_to_fix_and_keeps_its_folder_private() {
    let env = Env::new();
    let out = env
        .cmd("sp")
        .args(["codex", "--help"])
        .env("SP_CODEX", env.home.join("no-such-codex"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot start") && err.contains("set SP_CODEX"),
        "says what to do: {err}"
    );
    assert!(out.stdout.is_empty(), "--help went to codex, not to sp");
    assert_eq!(mode(&env.state), 0o700);
    assert_eq!(mode(&env.state.join("codex")), 0o700);
}

#[test]
fn a_socket_others_can_reach_is_refused_by_doctor_and_replaced_by_sp_codex() {
    let env = Env::new();
    let dir = env.state.join("codex");
    std::fs::create_dir_all(&dir).unwrap();
    set_mode(&env.state, 0o700);
    set_mode(&dir, 0o700);
    let sock = dir.join("app-server.sock");
    let _listener = UnixListener::bind(&sock).unwrap();
    set_mode(&sock, 0o666);

    let out = env.cmd("sp").arg("doctor").output().unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("[FAIL] codex: app-server socket refused")
            && text.contains("is not private to this user"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(1));

    // sp codex never talks to it: it removes it and starts its own (here: no Codex to start).
    let out = env
        .cmd("sp")
        .arg("codex")
        .env("SP_CODEX", env.home.join("no-such-codex"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        std::fs::symlink_metadata(&sock).is_err(),
        "the loose socket was removed, not used"
    );
}

//! The real `sp-receiver` binary's command line. (This crate having an integration test is
//! also what makes `cargo test` build the binary that the end-to-end suites at the top run.)
use std::process::Command;

const SP_RECEIVER: &str = env!("CARGO_BIN_EXE_sp-receiver");

#[test]
fn help_exits_zero_and_names_every_option() {
    let out = Command::new(SP_RECEIVER).arg("--help").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for opt in [
        "--init",
        "--login-url",
        "--listen",
        "--token-file",
        "--login-token-file",
        "--db",
        "--permission-expiry-s",
        "--prompt-expiry-s",
        "--public-url",
        "--trust-proxy",
        "--tls-cert",
        "--tls-key",
        "--max-connections",
        "--help",
        "--version",
    ] {
        assert!(text.contains(opt), "--help does not name {opt}:\n{text}");
    }
}

#[test]
fn unknown_option_is_refused_with_status_2() {
    let out = Command::new(SP_RECEIVER).arg("--nope").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--nope") && err.contains("--help"), "{err}");
}

#[test]
fn tls_cert_without_key_is_refused_with_status_2() {
    let out = Command::new(SP_RECEIVER)
        .args(["--tls-cert", "/nonexistent/cert.pem"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--tls-key"), "{err}");
}

#[test]
fn version_prints_the_version() {
    let out = Command::new(SP_RECEIVER).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
}

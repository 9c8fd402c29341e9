//! What `sp-receiver --help` must name: every option, and the defaults and environment
//! variables a person sets it up with. Checked by the receiver's own command-line test and by
//! the end-to-end one, from this one list.

/// The options, defaults and variables the help names.
pub const RECEIVER_HELP_NAMES: &[&str] = &[
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
    "--allow-private-push",
    "--not-now-s",
    "--help",
    "--version",
    "127.0.0.1:8787",
    "SESSIONPIPE_RECEIVER_DB",
    "SESSIONPIPE_RECEIVER_TOKEN_FILE",
    "SESSIONPIPE_RECEIVER_LOGIN_TOKEN_FILE",
    "receiver.db",
];

/// Asserts that `help` (the `--help` text) names every one of [`RECEIVER_HELP_NAMES`].
#[track_caller]
pub fn assert_help_names_all(help: &str) {
    for name in RECEIVER_HELP_NAMES {
        assert!(help.contains(name), "--help does not name {name}:\n{help}");
    }
}

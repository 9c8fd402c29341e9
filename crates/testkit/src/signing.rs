//! A signing device for tests, written from the signed-control spec (docs/protocol.md#control-2 and #control-3): our
//! own throwaway passkeys (ES256 from fixed seeds, RS256 from a committed test key), WebAuthn
//! assertions as a browser makes them, day keys, grants and `csig`. Nothing here is the
//! reference's; the reference's vectors are only a cross-check.
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Signer;
use p256::pkcs8::EncodePublicKey;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The machine, relying party, session and times our signed vectors are made for (they are
/// fixed so that the vectors written once stay valid).
pub mod vectors {
    pub const MACHINE: &str = "m_ourtestmachine00000001";
    pub const RP: &str = "control.test";
    pub const SESSION: &str = "claude-code:3f2b8c1e-5a6d-4e7f-8a9b-0c1d2e3f4a5b";
    pub const IAT: i64 = 1_800_000_000_000;
    pub const NOW: i64 = IAT + 90_000;
    pub const HOUR: i64 = 3_600_000;
}

pub const RSA_KEY_PEM: &str = include_str!("../fixtures/rs256-test-passkey.pem");
pub const RSA_WEAK_KEY_PEM: &str = include_str!("../fixtures/rs256-weak-test-key.pem");

pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn p256_key(seed: u8) -> p256::ecdsa::SigningKey {
    let mut bytes = [0u8; 32];
    bytes[0] = 0x42;
    bytes[31] = seed;
    p256::ecdsa::SigningKey::from_slice(&bytes).expect("a valid scalar")
}

pub enum Secret {
    Es256(p256::ecdsa::SigningKey),
    Rs256(Box<rsa::RsaPrivateKey>),
}

/// What a WebAuthn ceremony's clientDataJSON and authenticatorData say; each field can be
/// bent to make a broken assertion.
#[derive(Clone)]
pub struct Ceremony {
    pub kind: String,
    pub origin: String,
    pub cross_origin: bool,
    /// The rp id whose hash goes into authenticatorData.
    pub ad_rp: String,
    pub flags: u8,
}

impl Ceremony {
    pub fn get(rp_id: &str) -> Ceremony {
        let origin = if rp_id == "localhost" {
            "http://localhost:8787".to_string()
        } else {
            format!("https://{rp_id}")
        };
        Ceremony {
            kind: "webauthn.get".into(),
            origin,
            cross_origin: false,
            ad_rp: rp_id.into(),
            flags: 0x05,
        }
    }
}

pub struct Passkey {
    pub id: String,
    pub alg: i64,
    pub secret: Secret,
}

impl Passkey {
    pub fn es256(seed: u8) -> Passkey {
        Passkey {
            id: b64(&sha256(&[b'k', seed])[..24]),
            alg: -7,
            secret: Secret::Es256(p256_key(seed)),
        }
    }

    pub fn rs256() -> Passkey {
        Self::rsa_from(RSA_KEY_PEM, b'r')
    }

    pub fn rs256_weak() -> Passkey {
        Self::rsa_from(RSA_WEAK_KEY_PEM, b'w')
    }

    fn rsa_from(pem: &str, tag: u8) -> Passkey {
        use rsa::pkcs8::DecodePrivateKey;
        let k = rsa::RsaPrivateKey::from_pkcs8_pem(pem).expect("test RSA key");
        Passkey {
            id: b64(&sha256(&[b'r', tag])[..24]),
            alg: -257,
            secret: Secret::Rs256(Box::new(k)),
        }
    }

    pub fn spki(&self) -> String {
        let der = match &self.secret {
            Secret::Es256(k) => p256::PublicKey::from(k.verifying_key())
                .to_public_key_der()
                .unwrap(),
            Secret::Rs256(k) => k.to_public_key().to_public_key_der().unwrap(),
        };
        b64(der.as_bytes())
    }

    /// The key as the machine stores it: `{id, alg, spki}`.
    pub fn trusted(&self) -> Value {
        json!({"id": self.id, "alg": self.alg, "spki": self.spki()})
    }

    /// An assertion over `challenge` as a browser makes it: `{cred, ad, cd, sig}`.
    pub fn assert(&self, challenge: &[u8], c: &Ceremony) -> Value {
        let cd = format!(
            r#"{{"type":"{}","challenge":"{}","origin":"{}","crossOrigin":{}}}"#,
            c.kind,
            b64(challenge),
            c.origin,
            c.cross_origin
        );
        let mut ad = sha256(c.ad_rp.as_bytes()).to_vec();
        ad.push(c.flags);
        ad.extend_from_slice(&7u32.to_be_bytes());
        let mut signed = ad.clone();
        signed.extend_from_slice(&sha256(cd.as_bytes()));
        let sig = match &self.secret {
            Secret::Es256(k) => {
                let s: p256::ecdsa::Signature = k.sign(&signed);
                s.to_der().as_bytes().to_vec()
            }
            Secret::Rs256(k) => {
                use rsa::signature::{SignatureEncoding, Signer as _};
                let sk = rsa::pkcs1v15::SigningKey::<Sha256>::new((**k).clone());
                sk.sign(&signed).to_vec()
            }
        };
        json!({"cred": self.id, "ad": b64(&ad), "cd": b64(cd.as_bytes()), "sig": b64(&sig)})
    }
}

/// A day key and the grant a passkey signed for it.
pub struct DayKey {
    pub key: p256::ecdsa::SigningKey,
    pub grant: Value,
}

impl DayKey {
    pub fn grant_str(pub_spki: &str, iat: i64, exp: i64, rp: &str) -> String {
        format!(
            r#"{{"v":1,"t":"sessionpipe.grant","pub":"{pub_spki}","iat":{iat},"exp":{exp},"rp":"{rp}"}}"#
        )
    }

    pub fn new(seed: u8, passkey: &Passkey, iat: i64, exp: i64, rp: &str, c: &Ceremony) -> DayKey {
        let key = p256_key(seed);
        let spki = b64(p256::PublicKey::from(key.verifying_key())
            .to_public_key_der()
            .unwrap()
            .as_bytes());
        Self::with_str(key, passkey, &Self::grant_str(&spki, iat, exp, rp), c)
    }

    pub fn with_str(
        key: p256::ecdsa::SigningKey,
        passkey: &Passkey,
        s: &str,
        c: &Ceremony,
    ) -> DayKey {
        let mut grant = passkey.assert(&sha256(s.as_bytes()), c);
        grant["str"] = json!(s);
        DayKey { key, grant }
    }

    /// The day key's raw r‖s signature over the exact command bytes.
    pub fn csig(&self, cmd: &str) -> String {
        let s: p256::ecdsa::Signature = self.key.sign(cmd.as_bytes());
        b64(&s.to_bytes())
    }

    /// `{cmd, csig, grant}` as a receiver carries it.
    pub fn sign(&self, cmd: &str) -> Value {
        json!({"cmd": cmd, "csig": self.csig(cmd), "grant": self.grant})
    }
}

/// A fresh random nonce: 16 bytes, 22 base64url characters.
pub fn nonce() -> String {
    let mut b = [0u8; 16];
    let u = ulid::Ulid::new().0.to_be_bytes();
    b.copy_from_slice(&u);
    b64(&sha256(&b)[..16])
}

/// A command string written field by field, in the order a device writes it.
pub fn command(
    machine: &str,
    kind: &str,
    session: &str,
    fields: &[(&str, Value)],
    nonce: &str,
    iat: i64,
) -> String {
    let mut s = format!(
        r#"{{"v":1,"t":"sessionpipe.control","machine":"{machine}","kind":"{kind}","session":"{session}""#
    );
    for (k, v) in fields {
        s.push_str(&format!(",\"{k}\":{v}"));
    }
    s.push_str(&format!(r#","nonce":"{nonce}","iat":{iat}}}"#));
    s
}

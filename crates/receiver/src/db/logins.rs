//! Page logins: the SHA-256 of each cookie (never the cookie), tied to the login token in use,
//! with the login's CSRF secret (random; it opens nothing without the cookie); and the login
//! attempts allowed per client and overall (limits.rs), counted here so that receivers
//! sharing one database count them together.

use super::driver::{args, Conn, Engine};
use super::store::LoginStore;
use crate::limits::{take_login_attempt, LOGIN_ALL, LOGIN_OVERALL, LOGIN_PER_CLIENT};

// The logins' SQL, one text for both stores (written once: driver.rs).
const ADD_LOGIN: &str = "INSERT INTO logins(hash, token_fp, created_ms, last_ms) \
    VALUES (?1, ?2, ?3, ?3) ON CONFLICT(hash) DO UPDATE SET token_fp = excluded.token_fp, \
    created_ms = excluded.created_ms, last_ms = excluded.last_ms, csrf = NULL";
const REMOVE_LOGIN: &str = "DELETE FROM logins WHERE hash = ?1";
/// A valid login, with its CSRF secret (NULL until first asked for).
const LOGIN_CSRF: &str =
    "SELECT csrf FROM logins WHERE hash = ?1 AND token_fp = ?2 AND created_ms > ?3";
/// The first receiver to ask sets it; any other then reads that one.
const SET_CSRF: &str = "UPDATE logins SET csrf = ?2 WHERE hash = ?1 AND csrf IS NULL";
/// Full buckets are forgotten (none stored is a full one), so the table holds only the
/// clients that tried within the last minute.
const SWEEP_ATTEMPTS: &str = "DELETE FROM login_attempts WHERE full_ms <= ?1";
const ATTEMPT_FULL: &str = "SELECT full_ms FROM login_attempts WHERE key = ?1";
const SET_ATTEMPT: &str = "INSERT INTO login_attempts(key, full_ms) VALUES (?1, ?2) \
    ON CONFLICT(key) DO UPDATE SET full_ms = excluded.full_ms";
/// A success gives its attempt back: the bucket is full `?2` ms sooner (never before now).
const GIVE_BACK: &str = "UPDATE login_attempts \
    SET full_ms = CASE WHEN full_ms - ?2 > ?3 THEN full_ms - ?2 ELSE ?3 END WHERE key = ?1";

/// A login as a request names it: its cookie's hash, the fingerprint of the login token in
/// use, and the time it must have been made after (`since_ms`: older ones have expired).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoginKey<'a> {
    pub hash: &'a str,
    pub token_fp: &'a str,
    pub since_ms: i64,
}

impl LoginKey<'_> {
    /// The login's row with its CSRF secret, if it is valid.
    fn csrf(&self, c: &mut dyn Conn) -> anyhow::Result<Option<Option<String>>> {
        c.row(LOGIN_CSRF, args![self.hash, self.token_fp, self.since_ms])?
            .map(|r| r.opt_text(0))
            .transpose()
    }
}

/// The buckets a success gives its attempt back to, and how much sooner each is full (ms).
fn give_backs(client: &str) -> [(&str, i64); 2] {
    [
        (client, LOGIN_PER_CLIENT.token_ms()),
        (LOGIN_ALL, LOGIN_OVERALL.token_ms()),
    ]
}

impl<E: Engine> LoginStore for E {
    fn add_login(&self, hash: &str, token_fp: &str, now_ms: i64) -> anyhow::Result<()> {
        self.conn(|c| {
            c.execute(ADD_LOGIN, args![hash, token_fp, now_ms])
                .map(drop)
        })
    }

    /// Whether a login with this cookie hash exists for the current login token and was
    /// made after `since_ms`.
    fn login_valid(&self, login: LoginKey<'_>) -> anyhow::Result<bool> {
        self.conn(|c| Ok(login.csrf(c)?.is_some()))
    }

    fn remove_login(&self, hash: &str) -> anyhow::Result<()> {
        self.conn(|c| c.execute(REMOVE_LOGIN, args![hash]).map(drop))
    }

    /// A valid login's CSRF secret: the one stored, or `fresh` when it has none yet (a
    /// login made before secrets were stored, or never asked for one). `None`: no such
    /// login.
    fn login_csrf(&self, login: LoginKey<'_>, fresh: &str) -> anyhow::Result<Option<String>> {
        self.conn(|c| match login.csrf(c)? {
            None => Ok(None),
            Some(Some(csrf)) => Ok(Some(csrf)),
            Some(None) => {
                c.execute(SET_CSRF, args![login.hash, fresh])?;
                Ok(login.csrf(c)?.flatten())
            }
        })
    }

    /// Takes a login attempt from `client`'s bucket and the overall one; `Err(s)`: none is
    /// allowed for `s` seconds (and none is taken). One writer at a time across receivers
    /// (`lock_writes`), so two never take the same attempt.
    fn take_login_attempt(&self, client: &str, now_ms: i64) -> anyhow::Result<Result<(), u64>> {
        self.tx(|c| {
            c.lock_writes("login_attempts")?;
            c.execute(SWEEP_ATTEMPTS, args![now_ms])?;
            let mut full = |key: &str| -> anyhow::Result<Option<i64>> {
                c.row(ATTEMPT_FULL, args![key])?
                    .map(|r| r.int(0))
                    .transpose()
            };
            let (mine, overall) = (full(client)?, full(LOGIN_ALL)?);
            let taken = take_login_attempt(mine, overall, now_ms);
            if let Ok((mine, overall)) = taken {
                c.execute(SET_ATTEMPT, args![client, mine])?;
                c.execute(SET_ATTEMPT, args![LOGIN_ALL, overall])?;
            }
            Ok(taken.map(|_| ()))
        })
    }

    /// A login that succeeded gives its attempt back (only guesses count).
    fn give_back_login_attempt(&self, client: &str, now_ms: i64) -> anyhow::Result<()> {
        self.conn(|c| {
            for (key, ms) in give_backs(client) {
                c.execute(GIVE_BACK, args![key, ms, now_ms])?;
            }
            Ok(())
        })
    }
}

//! Whether the person is away from the machine (DECISIONS 27). `sp away on|off` says it
//! here; a receiver says it in its poll answers (the `sessionpipe-away` header, or `away` in
//! a 200's body). The newest word wins; a receiver's counts only while it is fresh, so a
//! receiver that went quiet cannot keep hooks waiting.
use super::Store;
use crate::clock::{format_ms, Millis};
use anyhow::Result;
use rusqlite::{params, OptionalExtension};

pub const LOCAL: &str = "local";
/// A receiver's word lasts this long after its last poll answer (two long polls and slack).
pub const RECEIVER_WORD_MS: Millis = 120_000;

impl Store {
    pub fn set_away(&mut self, source: &str, away: bool, now: Millis) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO away(source, away, at_ms, at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(source) DO UPDATE SET away=excluded.away, at_ms=excluded.at_ms, at=excluded.at",
            )?
            .execute(params![source, away, now, format_ms(now)])?;
        Ok(())
    }

    /// A receiver's word, written only when it changed or is about to go stale, so a poll
    /// loop does not write on every answer. `asked_at`: when the poll that brought it was sent.
    pub fn note_receiver_away(
        &mut self,
        sink: &str,
        away: bool,
        asked_at: Millis,
        now: Millis,
    ) -> Result<()> {
        // `sp away` set the receivers' switch after this poll was asked: its answer may be
        // older than that, and must not undo it. Later polls say the switch again.
        if self
            .local_away_ms()?
            .is_some_and(|(a, at)| a != away && at >= asked_at)
        {
            return Ok(());
        }
        let source = format!("sink:{sink}");
        let last: Option<(bool, Millis)> = self
            .conn
            .prepare_cached("SELECT away, at_ms FROM away WHERE source=?1")?
            .query_row([&source], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match last {
            Some((a, at)) if a == away && now - at < RECEIVER_WORD_MS / 4 => Ok(()),
            _ => self.set_away(&source, away, now),
        }
    }

    fn local_away_ms(&self) -> Result<Option<(bool, Millis)>> {
        Ok(self
            .conn
            .prepare_cached("SELECT away, at_ms FROM away WHERE source=?1")?
            .query_row([LOCAL], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// This machine's own word (`sp away`), and when.
    pub fn local_away(&self) -> Result<Option<(bool, String)>> {
        Ok(self
            .conn
            .prepare_cached("SELECT away, at FROM away WHERE source=?1")?
            .query_row([LOCAL], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// The newest word on whether the person is away, and who said it; `None` when nobody
    /// has (the person counts as at the desk).
    pub fn away(&self, now: Millis) -> Result<Option<(bool, String, String)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT away, source, at FROM away WHERE source = 'local' OR at_ms >= ?1 \
                 ORDER BY at_ms DESC LIMIT 1",
            )?
            .query_row([now - RECEIVER_WORD_MS], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_fresh_word_wins() {
        let d = tempfile::tempdir().unwrap();
        let mut s =
            crate::store::open(&d.path().join("c.db"), std::time::Duration::from_secs(1)).unwrap();
        assert_eq!(s.away(1_000).unwrap(), None);
        s.set_away(LOCAL, true, 1_000).unwrap();
        assert!(s.away(2_000).unwrap().unwrap().0);
        // The answer to a poll asked before `sp away` set the receiver's switch: ignored.
        s.note_receiver_away("phone", false, 900, 2_000).unwrap();
        assert_eq!(
            s.away(2_500).unwrap().unwrap(),
            (true, LOCAL.into(), format_ms(1_000))
        );
        s.note_receiver_away("phone", false, 1_100, 6_000).unwrap();
        assert_eq!(s.away(7_000).unwrap().unwrap().1, "sink:phone");
        assert!(!s.away(7_000).unwrap().unwrap().0);
        // The receiver went quiet: its word lapses and the local one stands again.
        assert!(s.away(6_000 + RECEIVER_WORD_MS + 1).unwrap().unwrap().0);
        s.set_away(LOCAL, false, 10_000_000).unwrap();
        assert!(!s.away(10_000_001).unwrap().unwrap().0);
    }
}

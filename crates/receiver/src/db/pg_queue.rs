//! The control queue on PostgreSQL: what only PostgreSQL does with it, each change
//! announced to every receiver (pg_wake.rs), tested here (the queue is written once in
//! queue.rs).

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::super::pg::PgStore;
    use super::super::pg_cluster::Cluster;
    use super::super::pg_wake::{Listener, Wakeup};
    use super::super::store::QueueStore;

    /// Two receivers' stores on one database: a message queued through B wakes A's
    /// listener with its poll key, and A then reads it; timed from B's call to A's read.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn queued_through_one_store_wakes_and_is_read_through_another() {
        let pg = Cluster::start();
        let a = PgStore::open(&pg.url()).unwrap();
        let b = PgStore::open(&pg.url()).unwrap();
        let (tx, rx) = mpsc::channel();
        let _l = Listener::start(pg.url().parse().unwrap(), move |w| {
            let _ = tx.send(w);
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            Wakeup::Connected
        );
        let now = 1_800_000_000_000;
        let mut took: Vec<Duration> = (0..200)
            .map(|i| {
                let session = format!("codex:s{i}");
                let t0 = Instant::now();
                b.insert_message(&session, &json!({"id": format!("m{i}")}), None, now)
                    .unwrap();
                loop {
                    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
                        Wakeup::Notified(k) if k == session => break,
                        _ => {}
                    }
                }
                let p = a.pending(&session, now).unwrap();
                assert_eq!(p.len(), 1);
                assert_eq!(p[0].body["id"], format!("m{i}"));
                t0.elapsed()
            })
            .collect();
        took.sort();
        let (p50, p99) = (took[100], took[197]);
        eprintln!("pg: queued through B to read through A, p50 {p50:?}, p99 {p99:?} (200)");
        assert!(p50 < Duration::from_millis(50), "p50 {p50:?}");

        // Acks through A are B's to read, and a signed envelope wakes its machine's key.
        a.insert_acks(
            &[json!({"id": "m0", "outcome": "delivered", "at": "x"})],
            now,
        )
        .unwrap();
        assert_eq!(b.first_ack("m0").unwrap().unwrap()["outcome"], "delivered");
        b.insert_envelope(
            "m1",
            "codex:s0",
            "prompt",
            &json!({"id": "E"}),
            now + 9,
            now,
        )
        .unwrap();
        while rx.recv_timeout(Duration::from_secs(10)).unwrap()
            != Wakeup::Notified("machine:m1".into())
        {}
        assert_eq!(a.machine_pending("m1", now).unwrap().len(), 1);
    }
}

//! Starting a server that says on stderr where it listens (`listening on <url>`), its stderr
//! kept as a log.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Spawns `c` with its stderr piped and waits (20 s at most) for its "listening on <url>"
/// line: the child, that URL, and the log of everything it writes to stderr.
pub fn spawn_listening(mut c: Command) -> (Child, String, Arc<Mutex<String>>) {
    let mut child = c
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sp-receiver");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            // Logged before the URL is handed over, so a caller that reads the log after
            // this returns always finds the line.
            sink.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(rest) = line.split("listening on ").nth(1) {
                let url = rest.split_whitespace().next().unwrap_or("").to_owned();
                let _ = tx.send(url);
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(url) => (child, url, log),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sp-receiver did not start: {}", log.lock().unwrap());
        }
    }
}

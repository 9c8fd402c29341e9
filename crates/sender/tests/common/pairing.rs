//! `sp pair` as a person runs it in a terminal: started, read line by line until it prints
//! the pairing link and the check digits, then left waiting for the page's approval.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A running `sp pair`: the link it printed, its six check digits, and the process.
pub struct SpPair {
    pub child: Child,
    pub link: String,
    pub digits: String,
    /// Everything it printed so far (for failure messages).
    pub printed: Arc<Mutex<String>>,
}

/// `sp pair phone --timeout 120` (`sp`: the `sp` command of a machine), started as
/// [`start`] does.
pub fn pair_phone(mut sp: Command) -> SpPair {
    sp.args(["pair", "phone", "--timeout", "120"]);
    start(sp)
}

/// Starts `cmd` (an `sp pair …` command) and waits up to 30 s for its link and digits.
pub fn start(mut cmd: Command) -> SpPair {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sp pair starts");
    let (tx, rx) = mpsc::channel::<String>();
    let out = BufReader::new(child.stdout.take().unwrap());
    let printed = Arc::new(Mutex::new(String::new()));
    let keep = Arc::clone(&printed);
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            keep.lock().unwrap().push_str(&format!("{line}\n"));
            let _ = tx.send(line);
        }
    });
    let (mut link, mut digits) = (None, None);
    while link.is_none() || digits.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("sp pair printed no link: {}", printed.lock().unwrap()));
        if line.contains("/pair?code=") {
            link = Some(line.trim().to_owned());
        }
        if let Some(d) = line.split("check digits:").nth(1) {
            digits = Some(d.replace(' ', ""));
        }
    }
    SpPair {
        child,
        link: link.unwrap(),
        digits: digits.unwrap(),
        printed,
    }
}

/// The page approves the pairing `sp pair` started (its check shown), and `sp pair` ends
/// successfully within 30 s.
pub fn approve(b: &mut super::browser::Browser, sp_pair: Child, printed: &Mutex<String>) {
    b.click("#pair-approve");
    b.wait("#pair-status[data-state=\"paired\"]");
    let done = super::env::finish(sp_pair, Duration::from_secs(30));
    assert!(
        done.status.success(),
        "sp pair: {}{}",
        printed.lock().unwrap(),
        String::from_utf8_lossy(&done.stderr)
    );
}

//! Append-only log file in the state directory. Hooks must never write to stdout or
//! stderr (the harness reads them), so everything worth knowing goes here.
use std::io::Write;
use std::sync::OnceLock;

static PROGRAM: OnceLock<String> = OnceLock::new();
static LEVEL: OnceLock<u8> = OnceLock::new();

pub fn init(program: &str) {
    let _ = PROGRAM.set(program.to_string());
    let level = match std::env::var("SESSIONPIPE_LOG").as_deref() {
        Ok("error") => 0,
        Ok("warn") => 1,
        Ok("debug") => 3,
        _ => 2,
    };
    let _ = LEVEL.set(level);
}

fn write(level: u8, tag: &str, msg: &str) {
    // Only our programs, which call `init`, write the log: the library used elsewhere (the
    // tests, the benchmark) never writes into the user's state folder.
    if PROGRAM.get().is_none() || level > *LEVEL.get().unwrap_or(&2) {
        return;
    }
    let line = format_line(tag, msg);
    let path = crate::paths::log_file();
    // The state folder is made private (or refused) once per process; sp.log is opened
    // without following a symlink (DECISIONS 24).
    static DIR: OnceLock<Result<Option<String>, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| match path.parent() {
        Some(d) => crate::files::private_dir(d)
            .map(|t| t.map(|t| t.0))
            .map_err(|e| e.to_string()),
        None => Ok(None),
    });
    let mut notes: Vec<String> = Vec::new();
    let opened = match dir {
        Err(e) => Err(e.clone()),
        Ok(t) => {
            // Whoever logs first in this process says that the folder was tightened.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if let Some(t) = t {
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    notes.push(t.clone());
                }
            }
            crate::files::open_private(&path, true).map_err(|e| e.to_string())
        }
    };
    // One write call per line keeps lines whole across concurrent processes (O_APPEND).
    match opened {
        Ok((mut f, tightened)) => {
            notes.extend(tightened.map(|t| t.0));
            let _ = f.write_all(line.as_bytes());
            for n in notes {
                let _ = f.write_all(format_line("INFO", &n).as_bytes());
            }
        }
        // No usable state folder or log file: stderr is the only place left (never stdout,
        // which a harness parses), with the reason.
        Err(e) => {
            let _ = std::io::stderr().write_all(line.as_bytes());
            let _ = std::io::stderr()
                .write_all(format_line("ERROR", &format!("no log file: {e}")).as_bytes());
        }
    }
}

fn format_line(tag: &str, msg: &str) -> String {
    let program = PROGRAM.get().map(String::as_str).unwrap_or("sp");
    format!(
        "{} {} {}[{}] {}\n",
        crate::clock::now_rfc3339(),
        tag,
        program,
        std::process::id(),
        msg.replace('\n', " ")
    )
}

pub fn error(msg: &str) {
    write(0, "ERROR", msg)
}
pub fn warn(msg: &str) {
    write(1, "WARN", msg)
}
pub fn info(msg: &str) {
    write(2, "INFO", msg)
}
pub fn debug(msg: &str) {
    write(3, "DEBUG", msg)
}

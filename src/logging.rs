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
    if level > *LEVEL.get().unwrap_or(&2) {
        return;
    }
    let program = PROGRAM.get().map(String::as_str).unwrap_or("sp");
    let line = format!(
        "{} {} {}[{}] {}\n",
        crate::clock::now_rfc3339(),
        tag,
        program,
        std::process::id(),
        msg.replace('\n', " ")
    );
    let path = crate::paths::log_file();
    let open = || {
        let mut o = std::fs::OpenOptions::new();
        o.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        o.open(&path).or_else(|e| {
            // First run: the state folder may not exist yet.
            let dir = path.parent().filter(|d| !d.exists()).ok_or(e)?;
            let mut b = std::fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            b.create(dir)?;
            o.open(&path)
        })
    };
    // One write call per line keeps lines whole across concurrent processes (O_APPEND).
    match open() {
        Ok(mut f) => {
            let _ = f.write_all(line.as_bytes());
        }
        // No usable state folder: stderr is the only place left (never stdout, which a
        // harness parses).
        Err(_) => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
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

use std::process::ExitCode;

fn main() -> ExitCode {
    // `sp queue | head` should end quietly, as any Unix filter does, not panic on EPIPE.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    spctl::logging::init("sp");
    let args: Vec<String> = std::env::args().skip(1).collect();
    match spctl::cli::run(args) {
        Ok(spctl::cli::Done::Ok) => ExitCode::SUCCESS,
        Ok(spctl::cli::Done::Problems) => ExitCode::from(1),
        Err(e) => {
            if let Some(c) = e.downcast_ref::<clap::Error>() {
                // --help and --version land here too (exit 0, on stdout); usage errors exit 2.
                let _ = c.print();
                ExitCode::from(c.exit_code().clamp(0, 255) as u8)
            } else if e.downcast_ref::<spctl::cli::Usage>().is_some() {
                eprintln!("sp: {e}; see sp --help");
                ExitCode::from(2)
            } else {
                eprintln!("sp: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}

use std::process::ExitCode;

fn main() -> ExitCode {
    spctl::logging::init("sp-sync");
    // A headless run's supervisor (spctl::runs), started by sp-sync itself.
    let args: Vec<_> = std::env::args_os().collect();
    if args.len() == 3 && args[1] == spctl::runs::SUPERVISOR_ARG {
        return spctl::runs::supervise(&args[2].to_string_lossy());
    }
    let mode = match spctl::sync::parse_args(std::env::args_os()) {
        Ok(m) => m,
        Err(e) => {
            // --help and --version land here too (exit 0, on stdout); usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    match spctl::sync::run(mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(spctl::sync::RunError::Config(e)) => {
            spctl::logging::error(&format!("{e:#}"));
            eprintln!("sp-sync: {e:#}");
            ExitCode::from(2)
        }
        Err(spctl::sync::RunError::Other(e)) => {
            spctl::logging::error(&format!("{e:#}"));
            eprintln!("sp-sync: {e:#}");
            ExitCode::from(1)
        }
    }
}

use std::process::ExitCode;

fn main() -> ExitCode {
    spctl::logging::init("sp-sync");
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("sp-sync {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let mode = match spctl::sync::parse_args(&args) {
        Ok(Some(m)) => m,
        Ok(None) => {
            print!("{}\n{}\n", spctl::sync::HELP, spctl::paths::ENV_HELP);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("sp-sync: {e}");
            return ExitCode::from(2);
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

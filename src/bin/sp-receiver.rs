//! sp-receiver: a small self-hosted sessionpipe receiver with a page to answer from a phone.
//! See `sp-receiver --help` and `spctl::receiver`.
use std::process::ExitCode;

fn main() -> ExitCode {
    spctl::logging::init("sp-receiver");
    let args: Vec<String> = std::env::args().skip(1).collect();
    match spctl::receiver::cli::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sp-receiver: {e:#}");
            spctl::receiver::cli::exit_code(&e)
        }
    }
}

//! sp-receiver: a small self-hosted sessionpipe receiver with a page to answer from a phone.
//! See `sp-receiver --help` and the `spreceiver` crate.
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match spreceiver::cli::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sp-receiver: {e:#}");
            spreceiver::cli::exit_code(&e)
        }
    }
}

//! The process floor for `cargo bench --bench hooks`: a trivial compiled program that reads
//! its stdin to the end and exits 0, as a hook that does nothing would.
use std::io::Read;

fn main() {
    let mut buf = Vec::with_capacity(8 * 1024);
    let _ = std::io::stdin().lock().read_to_end(&mut buf);
}

//! The build script of the crates whose tests start a throwaway PostgreSQL (the receiver's
//! unit tests, crates/sender/tests/two_receivers.rs): sets `cfg(has_postgres)` when
//! scripts/pg-cluster.sh finds the server (`bin`), so those tests, each marked
//! `#[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]`,
//! show as ignored without it instead of passing without running. With `CI` set (to anything
//! but empty, `0` or `false`) the cfg is set regardless: there PostgreSQL is installed, and a
//! missing one fails those tests loudly. One file, named by both crates' `build` key.

use std::path::Path;
use std::process::Command;

fn main() {
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let script = Path::new(&root).join("../../scripts/pg-cluster.sh");
    println!("cargo::rustc-check-cfg=cfg(has_postgres)");
    println!("cargo::rerun-if-changed={}", script.display());
    println!("cargo::rerun-if-env-changed=CI");
    // Installing or removing the server changes these (Debian: its versions' folder, and
    // dpkg's record of every package); a path that is missing would rerun every build.
    for p in ["/usr/lib/postgresql", "/var/lib/dpkg/status"] {
        if Path::new(p).exists() {
            println!("cargo::rerun-if-changed={p}");
        }
    }
    let installed = Command::new("bash")
        .arg(&script)
        .arg("bin")
        .output()
        .is_ok_and(|o| o.status.success());
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"));
    if installed || ci {
        println!("cargo::rustc-cfg=has_postgres");
    }
}

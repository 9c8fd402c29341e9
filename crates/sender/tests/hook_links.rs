//! The hooks link only what a hook needs (issue 36): no HTTP or TLS client in `sp-permission`,
//! `sp-stop` or `sp-event`. What needs the network goes through sp-sync, which does link them
//! (the control below: the same scan finds them there, so it can find them at all).
//!
//! Reads the ELF symbol table of the binaries cargo built for this test run: a function or
//! datum of `ureq`, `rustls` or `webpki` that the linker kept is a symbol naming its crate. A
//! stripped binary (a release build) has no symbol table; then its bytes are searched for the
//! crates' names instead.
//!
//! And each shared library a hook loads is work on every tool call before `main`: the hooks
//! load libc and libgcc_s only (the bundled SQLite is built without full-text search, which
//! alone needed libm: `.cargo/config.toml`).
use std::path::Path;

const CLIENT_CRATES: [&str; 3] = ["ureq", "rustls", "webpki"];
/// The hook binaries, by name, as cargo built them for this test run.
const HOOKS: [(&str, &str); 3] = [
    ("sp-permission", env!("CARGO_BIN_EXE_sp-permission")),
    ("sp-stop", env!("CARGO_BIN_EXE_sp-stop")),
    ("sp-event", env!("CARGO_BIN_EXE_sp-event")),
];

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize
}
fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// A 64-bit little-endian ELF file's section headers.
fn sections(b: &[u8]) -> Vec<&[u8]> {
    assert_eq!(&b[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((b[4], b[5]), (2, 1), "not 64-bit little-endian ELF");
    let (shoff, shentsize, shnum) = (u64_at(b, 0x28), u16_at(b, 0x3a), u16_at(b, 0x3c));
    (0..shnum)
        .map(|i| &b[shoff + i * shentsize..shoff + (i + 1) * shentsize])
        .collect()
}

/// The first section of type `kind`: its header, its bytes, and the bytes of the string table
/// it links to (`sh_link`).
fn section_with_strings(b: &[u8], kind: usize) -> Option<(&[u8], &[u8], &[u8])> {
    let all = sections(b);
    let header = *all.iter().find(|s| u32_at(s, 4) == kind)?;
    let bytes_of = |h: &[u8]| {
        let off = u64_at(h, 0x18);
        &b[off..off + u64_at(h, 0x20)]
    };
    Some((
        header,
        bytes_of(header),
        bytes_of(all[u32_at(header, 0x28)]),
    ))
}

/// The NUL-ended string at `at` in a string table.
fn string_at(strs: &[u8], at: usize) -> String {
    let end = strs[at..].iter().position(|&c| c == 0).unwrap();
    String::from_utf8_lossy(&strs[at..at + end]).into_owned()
}

/// The names of the defined functions and data in a 64-bit little-endian ELF file's symbol
/// table; None when it has none (stripped).
fn defined_symbols(b: &[u8]) -> Option<Vec<String>> {
    // SHT_SYMTAB = 2.
    let (header, symbols, strs) = section_with_strings(b, 2)?;
    let mut names = Vec::new();
    for sym in symbols.chunks_exact(u64_at(header, 0x38)) {
        let (name, info, shndx) = (u32_at(sym, 0), sym[4], u16_at(sym, 6));
        // STT_OBJECT = 1, STT_FUNC = 2; shndx 0 is undefined.
        if matches!(info & 0xf, 1 | 2) && shndx != 0 {
            names.push(string_at(strs, name));
        }
    }
    Some(names)
}

/// The shared libraries an ELF file names as needed (`DT_NEEDED` in its dynamic section).
fn needed_libraries(b: &[u8]) -> Vec<String> {
    // SHT_DYNAMIC = 6.
    let Some((_, entries, strs)) = section_with_strings(b, 6) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in entries.chunks_exact(16) {
        // DT_NEEDED = 1; DT_NULL = 0 ends the table.
        match u64_at(entry, 0) {
            0 => break,
            1 => names.push(string_at(strs, u64_at(entry, 8))),
            _ => {}
        }
    }
    names
}

/// Which of the client crates the binary links, and an example of each.
fn linked_clients(path: &Path) -> Vec<(String, String)> {
    let bytes = std::fs::read(path).unwrap();
    let mut found = Vec::new();
    match defined_symbols(&bytes) {
        Some(names) => {
            for krate in CLIENT_CRATES {
                if let Some(n) = names.iter().find(|n| n.contains(krate)) {
                    found.push((krate.to_string(), n.clone()));
                }
            }
        }
        None => {
            for krate in CLIENT_CRATES {
                if memchr::memmem::find(&bytes, krate.as_bytes()).is_some() {
                    found.push((krate.to_string(), "(the name, in a stripped binary)".into()));
                }
            }
        }
    }
    found
}

#[test]
fn hooks_link_no_http_or_tls_client() {
    for (name, path) in HOOKS {
        let found = linked_clients(Path::new(path));
        assert!(
            found.is_empty(),
            "{name} links an HTTP or TLS client (hooks reach the network only through sp-sync): {found:?}"
        );
    }
}

#[test]
fn the_scan_finds_the_client_in_sp_sync() {
    let found = linked_clients(Path::new(env!("CARGO_BIN_EXE_sp-sync")));
    let crates: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(crates, CLIENT_CRATES, "{found:?}");
}

#[test]
fn hooks_load_no_shared_library_but_libc_and_libgcc_s() {
    for (name, path) in HOOKS {
        let needed = needed_libraries(&std::fs::read(path).unwrap());
        // The scan reads the table at all: every binary here names libc.
        assert!(
            needed.iter().any(|l| l == "libc.so.6"),
            "{name}: no libc.so.6 among {needed:?}"
        );
        let more: Vec<&String> = needed
            .iter()
            // The loader itself (named in a debug build) is there for every program.
            .filter(|l| {
                !["libc.so.6", "libgcc_s.so.1"].contains(&l.as_str()) && !l.starts_with("ld-linux")
            })
            .collect();
        assert!(
            more.is_empty(),
            "{name} loads {more:?} as well on every call (a C dependency's feature? see .cargo/config.toml)"
        );
    }
}

//! Within a crate the modules form layers: a module never imports one above it (GUIDE, Shape).
//! This reads the `crate::…` and `super::…` paths of every module under `src/` (tests left
//! out) and fails on any cycle between sibling modules: between the top-level modules, and
//! between the submodules of one module. A child using its parent's items (`super::Thing`)
//! and a parent using its children are not layers and are not counted.
//!
//! Covered: the sender (this crate), the wire crate and the receiver.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// One import between two sibling modules, with where it was seen.
#[derive(Debug, Clone)]
struct Edge {
    from: Module,
    to: Module,
    file: PathBuf,
    path: String,
}

/// The module a source file is, relative to `src` (`sync/mod.rs` and `sync.rs` are `sync`,
/// `lib.rs` is the root); binaries (`src/bin`) are not modules of the library.
fn module_of(rel: &Path) -> Option<Module> {
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().map(String::as_str) == Some("bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text with comments, string and char literals blanked, so that only code remains.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(b.len(), |n| i + n + 2);
            out.push(' ');
            i = end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|c| *c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            let end = src[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            out.push_str("\"\"");
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if b[i] == b'\'' && is_char_literal(&src[i..]) {
            let j = src[i + 1..].find('\'').map_or(b.len(), |n| i + 1 + n + 1);
            let j = if src[i + 1..].starts_with("\\'") {
                i + 4
            } else {
                j
            };
            out.push_str("' '");
            i = j;
        } else {
            let ch = rest.chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `'x'`, `'\n'`, `'\''`, `'\u{..}'` are char literals; `'a` in `&'a str` is a lifetime.
fn is_char_literal(s: &str) -> bool {
    let mut cs = s.chars().skip(1);
    match cs.next() {
        Some('\\') => true,
        Some(_) => cs.next() == Some('\''),
        None => false,
    }
}

/// The code without `#[cfg(test)]` items (the `mod tests { … }` blocks and test-only fns):
/// tests may reach anywhere.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        // The item ends at its block's closing brace, or at `;` for an item without one.
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, ch) in after.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn ident_at(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let n = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (n > 0).then(|| (&s[..n], &s[n..]))
}

/// Reads a path or use tree after `crate`/`super` (`::a::b`, `::{a, b::{c}}`), adding each
/// full path to `out`. Returns what follows it.
fn use_tree<'a>(mut s: &'a str, prefix: &[String], out: &mut Vec<Module>) -> &'a str {
    let mut path = prefix.to_vec();
    loop {
        let t = s.trim_start();
        let Some(after) = t.strip_prefix("::") else {
            out.push(path);
            return t;
        };
        let after = after.trim_start();
        if let Some(mut inner) = after.strip_prefix('{') {
            loop {
                inner = inner.trim_start();
                if let Some(r) = inner.strip_prefix('}') {
                    return r;
                }
                if let Some(r) = inner.strip_prefix(',') {
                    inner = r;
                    continue;
                }
                match ident_at(inner) {
                    Some((id, r)) => {
                        let mut p = path.clone();
                        if id != "self" {
                            p.push(id.to_string());
                        }
                        inner = use_tree(r, &p, out);
                        // `as name` after a leaf
                        let t = inner.trim_start();
                        if let Some(r) = t.strip_prefix("as ") {
                            inner = ident_at(r).map_or(r, |(_, r)| r);
                        }
                    }
                    None => {
                        // `*` or something this reader does not know: skip one char.
                        let mut cs = inner.chars();
                        cs.next();
                        inner = cs.as_str();
                        if inner.is_empty() {
                            return inner;
                        }
                    }
                }
            }
        }
        match ident_at(after) {
            Some((id, r)) if id != "self" => {
                path.push(id.to_string());
                s = r;
            }
            _ => {
                out.push(path);
                return after;
            }
        }
    }
}

/// Every module path one module's code names through `crate::` or `super::`, resolved to
/// absolute paths (possibly running on into items inside a module).
fn named_paths(module: &Module, code: &str) -> Vec<Module> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for key in ["crate", "super"] {
        let mut from = 0;
        while let Some(n) = code[from..].find(key) {
            let at = from + n;
            from = at + key.len();
            let before_ok = at == 0 || {
                let c = bytes[at - 1] as char;
                !(c.is_alphanumeric() || c == '_' || c == ':')
            };
            let rest = &code[from..];
            if !before_ok || !rest.trim_start().starts_with("::") {
                continue;
            }
            let base: Module = if key == "crate" {
                Vec::new()
            } else {
                // `super` of `a/b.rs` (module a::b) is `a`; of `a/b/mod.rs` it is `a` too.
                let mut m = module.clone();
                m.pop();
                m
            };
            let mut found = Vec::new();
            use_tree(rest, &base, &mut found);
            // `super::super::x`
            for mut p in found {
                let mut up = 0;
                while p.get(base.len()).map(String::as_str) == Some("super") {
                    up += 1;
                    p.remove(base.len());
                }
                let keep = base.len().saturating_sub(up);
                let mut q: Module = base[..keep].to_vec();
                q.extend_from_slice(&p[base.len()..]);
                out.push(q);
            }
        }
    }
    out
}

/// The sibling imports of the crate under `src`.
fn edges(src: &Path) -> (BTreeSet<Module>, Vec<Edge>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeMap::new();
    for f in &files {
        if let Some(m) = module_of(f.strip_prefix(src).unwrap()) {
            modules.insert(m, f.clone());
        }
    }
    let known: BTreeSet<Module> = modules.keys().cloned().collect();
    let mut out = Vec::new();
    for (m, f) in &modules {
        let text = std::fs::read_to_string(f).unwrap();
        let code = without_tests(&code_only(&text));
        for p in named_paths(m, &code) {
            // The longest prefix of the path that is a module.
            let Some(target) = (0..=p.len())
                .rev()
                .map(|k| p[..k].to_vec())
                .find(|q| known.contains(q))
            else {
                continue;
            };
            let common = m.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < m.len() && common < target.len() {
                out.push(Edge {
                    from: m[..=common].to_vec(),
                    to: target[..=common].to_vec(),
                    file: f.strip_prefix(src).unwrap().to_path_buf(),
                    path: p.join("::"),
                });
            }
        }
    }
    (known, out)
}

/// The cycles among sibling modules (strongly connected groups of two or more), each with
/// the imports that close it.
fn cycles(src: &Path) -> Vec<String> {
    let (_, edges) = edges(src);
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for e in &edges {
        graph
            .entry(e.from.clone())
            .or_default()
            .insert(e.to.clone());
        graph.entry(e.to.clone()).or_default();
    }
    let reach = |from: &Module| -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in &graph[&m] {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<Module, BTreeSet<Module>> =
        graph.keys().map(|m| (m.clone(), reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for m in graph.keys() {
        if done.contains(m) || !reaches[m].contains(m) {
            continue;
        }
        let group: BTreeSet<Module> = reaches[m]
            .iter()
            .filter(|n| reaches[*n].contains(m))
            .cloned()
            .collect();
        done.extend(group.iter().cloned());
        let names: Vec<String> = group.iter().map(|g| g.join("::")).collect();
        let mut text = format!("cycle among {}:", names.join(", "));
        // Each import between two modules of the cycle once, with its first place.
        let mut shown: BTreeMap<(&Module, &Module), BTreeSet<String>> = BTreeMap::new();
        for e in edges
            .iter()
            .filter(|e| group.contains(&e.from) && group.contains(&e.to))
        {
            let seen = shown.entry((&e.from, &e.to)).or_default();
            if seen.len() < 3 && seen.insert(e.path.clone()) {
                text.push_str(&format!(
                    "\n    {} -> {}   ({}: crate::{})",
                    e.from.join("::"),
                    e.to.join("::"),
                    e.file.display(),
                    e.path
                ));
            }
        }
        out.push(text);
    }
    out
}

fn assert_layers(src: &Path) {
    let found = cycles(src);
    assert!(
        found.is_empty(),
        "{}: modules must form layers (a module never imports one above it):\n{}",
        src.display(),
        found.join("\n")
    );
}

#[test]
fn the_sender_modules_form_layers() {
    assert_layers(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}

#[test]
fn the_wire_modules_form_layers() {
    assert_layers(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/src"));
}

#[test]
fn the_receiver_modules_form_layers() {
    assert_layers(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../receiver/src"));
}

/// The checker itself: a crate with a top-level cycle through a `use` group, a submodule
/// cycle through `super::`, and imports it must not count (tests, comments, strings, a
/// child using its parent).
#[test]
fn the_checker_finds_cycles_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| {
        let p = src.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\nmod d;\n");
    write("a.rs", "use crate::{paths, b::{Thing, other::X}};\n");
    write(
        "b/mod.rs",
        "mod other;\nmod more;\npub struct Thing;\nfn f() { crate::c::go(); }\n",
    );
    write("b/other.rs", "use super::more::Y;\npub struct X;\n");
    write(
        "b/more.rs",
        "pub struct Y;\nfn g() -> super::other::X { todo!() }\n",
    );
    write(
        "c.rs",
        "// crate::d::nothing\nconst S: &str = \"crate::d::x\";\npub fn go() { let _ = crate::a::f; let _ = '}'; }\n\
         #[cfg(test)]\nmod tests { use crate::d::Z; }\n",
    );
    write(
        "d.rs",
        "pub struct Z;\nfn h<'a>(s: &'a str) -> &'a str { crate::b::Thing; s }\n",
    );
    let found = cycles(src);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("cycle among a, b, c:"), "{}", found[0]);
    assert!(
        found[0].contains("a -> b   (a.rs: crate::b::Thing)"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("c -> a   (c.rs: crate::a::f)"),
        "{}",
        found[0]
    );
    assert!(!found[0].contains("-> d"), "{}", found[0]);
    assert!(
        found[1].starts_with("cycle among b::more, b::other:"),
        "{}",
        found[1]
    );
}

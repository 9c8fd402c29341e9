//! Every reference in the repository to a document resolves inside the repository (issue 36):
//! `DECISIONS n` names entry n of docs/decisions.md, `docs/X.md#anchor` a file and a section
//! of it, a Markdown link a file (and section) beside it; and nothing cites the protocol's own
//! files (CONTROL.md, HTTP.md, the protocol and harness notes), which a clone does not hold.
//! `scripts/doc-refs.py` rewrites such citations to docs/.
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The repository's text files: everything but build output, dependencies and git.
fn text_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            if !matches!(name.as_str(), ".git" | "target" | "node_modules" | ".deps") {
                text_files(&path, out);
            }
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push((path, text));
        }
    }
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, punctuation other than `-` and
/// `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown file offers: explicit `id="…"` and its headings' slugs.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let mut rest = line;
        while let Some(i) = rest.find("id=\"") {
            rest = &rest[i + 4..];
            if let Some(end) = rest.find('"') {
                set.insert(rest[..end].to_string());
            }
        }
        if !fenced && line.starts_with('#') {
            set.insert(slug(line.trim_start_matches('#')));
        }
    }
    set
}

/// The numbers a `DECISIONS` citation names: "30", "25, 26", "9-13", "22-23", "5, 28".
fn cited_numbers(after: &str) -> Option<Vec<u32>> {
    let mut nums = Vec::new();
    let mut rest = after.strip_prefix(' ')?;
    let mut range_from: Option<u32> = None;
    loop {
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() {
            break;
        }
        let n: u32 = digits.parse().unwrap();
        match range_from.take() {
            Some(from) => nums.extend(from..=n),
            None => nums.push(n),
        }
        rest = &rest[digits.len()..];
        if let Some(r) = rest.strip_prefix('-') {
            range_from = nums.pop();
            rest = r;
        } else if let Some(r) = rest.strip_prefix(", ") {
            rest = r;
        } else {
            break;
        }
    }
    (!nums.is_empty()).then_some(nums)
}

fn is_doc_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '#')
}

#[test]
fn every_document_reference_resolves_inside_the_repository() {
    let root = root();
    let mut files = Vec::new();
    text_files(&root, &mut files);
    let docs: HashMap<PathBuf, String> = files
        .iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "md"))
        .map(|(p, t)| (p.canonicalize().unwrap(), t.clone()))
        .collect();
    let decisions = anchors(&docs[&root.join("docs/decisions.md").canonicalize().unwrap()]);
    for n in 1..=41 {
        assert!(
            decisions.contains(&n.to_string()),
            "docs/decisions.md has no entry {n}"
        );
    }
    // Names of documents that live only outside the repository.
    let foreign = [
        "CONTROL.md",
        "HTTP.md",
        "DECISIONS.md",
        "PROTOCOL.md",
        "sessionpipe-protocol.md",
        "shared/spec",
        "seeds/",
    ];
    let mut bad = Vec::new();
    let mut checked = 0;
    for (path, text) in &files {
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        if rel == "scripts/doc-refs.py" || rel == "crates/sender/tests/doc_refs.rs" {
            continue; // they name the foreign documents in order to rewrite or refuse them
        }
        let resolve = |target: &str, base: &Path| -> Option<String> {
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target, None),
            };
            let full = if file.is_empty() {
                path.clone()
            } else {
                base.join(file)
            };
            let Ok(full) = full.canonicalize() else {
                return Some(format!("{target}: no such file"));
            };
            match (anchor, docs.get(&full)) {
                (Some(a), Some(doc)) if !anchors(doc).contains(a) => {
                    Some(format!("{target}: no section #{a}"))
                }
                _ => None,
            }
        };
        for (i, line) in text.lines().enumerate() {
            let at = format!("{rel}:{}", i + 1);
            for name in foreign {
                if line.contains(name) {
                    bad.push(format!(
                        "{at}: cites {name}, which the repository does not hold"
                    ));
                }
            }
            if line.contains("harness-contracts")
                && line
                    .replace("docs/harness-contracts", "")
                    .replace("](harness-contracts", "")
                    .contains("harness-contracts")
            {
                bad.push(format!("{at}: cites harness-contracts outside docs/"));
            }
            for (j, _) in line.match_indices("DECISIONS") {
                let mut after = line[j + "DECISIONS".len()..].to_string();
                if after.is_empty() {
                    // The number went to the next line, after its comment marker.
                    let next = text.lines().nth(i + 1).unwrap_or("");
                    after = format!(
                        " {}",
                        next.trim_start()
                            .trim_start_matches(['/', '!', '#', '*'])
                            .trim_start()
                    );
                }
                match cited_numbers(&after) {
                    Some(nums) => {
                        for n in nums {
                            checked += 1;
                            if !decisions.contains(&n.to_string()) {
                                bad.push(format!(
                                    "{at}: DECISIONS {n} is not in docs/decisions.md"
                                ));
                            }
                        }
                    }
                    None => bad.push(format!("{at}: DECISIONS without an entry number")),
                }
            }
            // docs/X.md[#anchor], from anywhere.
            for (j, _) in line.match_indices("docs/") {
                if line[..j].ends_with(|c: char| is_doc_char(c) && c != '/') {
                    continue; // part of a longer path or URL (e.g. kiro.dev/docs/…)
                }
                let target: String = line[j..].chars().take_while(|&c| is_doc_char(c)).collect();
                let target = target.trim_end_matches(['.', '#']);
                if !target.contains(".md") {
                    continue;
                }
                checked += 1;
                if let Some(why) = resolve(target, &root) {
                    bad.push(format!("{at}: {why}"));
                }
            }
            // Markdown links to a file beside this one: [text](file.md#anchor), (#anchor).
            if rel.ends_with(".md") {
                for (j, _) in line.match_indices("](") {
                    let target: String = line[j + 2..].chars().take_while(|&c| c != ')').collect();
                    let target = target.split_whitespace().next().unwrap_or("");
                    if target.is_empty() || target.contains("://") || target.starts_with("mailto:")
                    {
                        continue;
                    }
                    checked += 1;
                    if let Some(why) = resolve(target, path.parent().unwrap()) {
                        bad.push(format!("{at}: {why}"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 300,
        "only {checked} references found: is the scan broken?"
    );
    assert!(
        bad.is_empty(),
        "references that do not resolve in the repository:\n{}",
        bad.join("\n")
    );
}

#[test]
fn decisions_citations_are_parsed_as_the_code_writes_them() {
    assert_eq!(cited_numbers(" 30)"), Some(vec![30]));
    assert_eq!(cited_numbers(" 25, 26)"), Some(vec![25, 26]));
    assert_eq!(cited_numbers(" 9-13): "), Some(vec![9, 10, 11, 12, 13]));
    assert_eq!(cited_numbers(" 30's fields"), Some(vec![30]));
    assert_eq!(cited_numbers(".md"), None);
    assert_eq!(
        slug(" 1. Who does what (CONTROL §1)"),
        "1-who-does-what-control-1"
    );
    assert!(anchors("<a id=\"36\"></a>\n## Hello, world").contains("hello-world"));
}

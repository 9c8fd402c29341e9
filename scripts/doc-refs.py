#!/usr/bin/env python3
"""Rewrite citations of the protocol's documents (CONTROL.md, HTTP.md, the protocol and
harness notes), which a clone does not hold, to the docs/ sections that hold those facts in
our words. Idempotent: run it again after a merge brings in new citations, then run
`cargo test --locked -p sessionpipe-control --test doc_refs` to see what is left.

`DECISIONS n` citations stay as they are: they name docs/decisions.md entry n.

    python3 scripts/doc-refs.py            # rewrite the tracked files in place
    python3 scripts/doc-refs.py --check    # list what it would change, change nothing
"""
import re
import subprocess
import sys

P = "docs/protocol.md"
H = "docs/harness-contracts.md"

CONTROL = {"1": "control-1", "2": "control-2", "3": "control-3", "3.1": "control-3.1",
           "3.2": "control-3.2", "3.3": "control-3.3", "5": "control-5", "6": "control-6"}
HTTP = {"1": "http-1", "2": "http-2", "3": "http-3"}
PROTOCOL_NOTES = {"2": "http", "2.1": "http-1", "2.2": "http-2", "3.1": "envelope"}
HARNESS = {"1": "claude-code", "1.3": "claude-code-permission", "1.5": "claude-code-stop",
           "2": "codex", "2.1": "codex-registration", "4": "cursor", "5": "copilot-cli",
           "6": "kiro", "7": "gemini-cli", "11": "measured"}

SEC = r"§(\d+(?:\.\d+)?)"


def sub_all(text):
    rules = [
        # The seed versions, named by commit.
        (r"(?:sessionpipe |seed )?CONTROL\.md seed e918475", P + "#seed"),
        (r"seed CONTROL\.md / HTTP\.md §3", P + "#seed"),
        (r"seed CONTROL\.md §3", P + "#seed"),
        (r"`HTTP\.md`, `CONTROL\.md` @ e918475", f"`{P}#seed`, `{P}#http`"),
        (r"HTTP\.md §2, batch\.json @ e918475", P + "#http-2"),
        (r"sessionpipe-protocol\.md \\u00a72", P + "#seed"),
        (r"CONTROL\.md §2-§3", f"{P}#control-2 and #control-3"),
        (r"Factory Droid: Claude-shaped hooks \(harness-contracts §6\)",
         f"Factory Droid: Claude-shaped hooks ({H}#droid)"),
        (r"harness-contracts §2-§7", H),
        (r"(?:the reference's |the protocol's )?CONTROL\.md " + SEC,
         lambda m: f"{P}#{CONTROL[m.group(1)]}"),
        (r"(?:the reference's |the protocol's )?HTTP\.md " + SEC,
         lambda m: f"{P}#{HTTP[m.group(1)]}"),
        (r"(?:the reference's )?CONTROL\.md\b", P + "#control"),
        (r"(?:shared/spec/)?sessionpipe-protocol\.md`? " + SEC,
         lambda m: f"{P}#{PROTOCOL_NOTES[m.group(1)]}"),
        (r"(?:shared/spec/)?harness-contracts(?:\.md)? " + SEC,
         lambda m: f"{H}#{HARNESS[m.group(1)]}"),
        (r"(?:shared/spec/)?(?<![/\[(])harness-contracts\.md", H),
        (r"(?<!docs/)DECISIONS\.md", "docs/decisions.md"),
        (r"PROTOCOL\.md §3\.1, event\.json @ e918475", P + "#envelope"),
    ]
    for pat, rep in rules:
        text = re.sub(pat, rep, text)
    # A list after a rewritten citation: "#control-3 and §5", "#claude-code-permission, §11".
    follow = [(r"(" + re.escape(P) + r"#control-[\d.]+(?:(?:,| and) #control-[\d.]+)*)(,| and) " + SEC,
               lambda m: f"{m.group(1)}{m.group(2)} #{CONTROL[m.group(3)]}"),
              (r"(" + re.escape(H) + r"#[a-z-]+)(,| and) " + SEC,
               lambda m: f"{m.group(1)}{m.group(2)} #{HARNESS[m.group(3)]}")]
    for pat, rep in follow:
        while True:
            new = re.sub(pat, rep, text)
            if new == text:
                break
            text = new
    return text


KEEP = {
    "scripts/doc-refs.py",
    "crates/sender/tests/doc_refs.rs",
}


def main():
    check = "--check" in sys.argv[1:]
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    changed = 0
    for f in files:
        # The checks that list the foreign names on purpose are left as they are.
        if not f or f.startswith("docs/protocol.md") or f in KEEP:
            continue
        try:
            with open(f, encoding="utf-8") as fh:
                old = fh.read()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        new = sub_all(old)
        if new != old:
            changed += 1
            print(f)
            if not check:
                with open(f, "w", encoding="utf-8") as fh:
                    fh.write(new)
    print(f"{changed} file(s) {'to change' if check else 'changed'}", file=sys.stderr)


if __name__ == "__main__":
    main()

fn main() -> std::process::ExitCode {
    spctl::hook::main("sp-event", "Session hook (SessionStart, UserPromptSubmit, PostToolUse, PostToolUseFailure, SessionEnd, ...): keeps the session live; prints nothing")
}

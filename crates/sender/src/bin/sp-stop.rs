fn main() -> std::process::ExitCode {
    spctl::hook::main(
        "sp-stop",
        "Stop hook: continues the turn with prompts queued from a receiver",
    )
}

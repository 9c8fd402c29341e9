fn main() -> std::process::ExitCode {
    spctl::hook::main(
        "sp-permission",
        "PermissionRequest hook: waits for a remote allow or deny",
    )
}

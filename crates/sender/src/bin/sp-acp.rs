fn main() -> std::process::ExitCode {
    spctl::acp::main()
}

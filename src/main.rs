fn main() -> std::process::ExitCode {
    match dedupd::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dedupd: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

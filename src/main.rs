/// Large blocks on transparent huge pages (see `HugePageAlloc`): only this
/// binary, not the library's benchmarks and tests.
#[global_allocator]
static ALLOC: dedupd::cli::run::HugePageAlloc = dedupd::cli::run::HugePageAlloc;

fn main() -> std::process::ExitCode {
    match dedupd::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            dedupd::cli::logs::report_exit_error(&e);
            std::process::ExitCode::from(2)
        }
    }
}

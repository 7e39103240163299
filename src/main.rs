// jemalloc as the process's `malloc`, for librdkafka's C code as much as for
// Rust (the unprefixed build exports malloc/free/...; `System` below calls
// them too). librdkafka allocates and frees several blocks per record, many
// freed on another thread than the one that allocated them; with glibc's
// malloc that is 20-25% of the daemon's CPU and leaves free memory in
// per-thread arenas. jemalloc: -24-28% CPU per record in both slicing modes
// (docs/dev/performance-daemon.md §7).
#[cfg(target_os = "linux")]
use tikv_jemalloc_sys::mallctl;

/// jemalloc's settings, read at its start (`malloc_conf` in its manual):
/// freed pages go back to the kernel after 1 s instead of 10 s, so the
/// resident size follows the live heap: peak RSS 100 instead of 197 MiB
/// (input-partitions) at the same CPU per record (docs/dev/performance-daemon.md
/// §7). Two arenas as well (`narenas:2`) cost 25% more CPU.
#[cfg(target_os = "linux")]
#[unsafe(export_name = "malloc_conf")]
pub static MALLOC_CONF: &[u8; 37] = b"dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// Large blocks on transparent huge pages (see `HugePageAlloc`): only this
/// binary, not the library's benchmarks and tests.
#[global_allocator]
static ALLOC: dedupd::cli::run::HugePageAlloc = dedupd::cli::run::HugePageAlloc;

/// jemalloc's account of the heap (`dedupd_heap_bytes`): its statistics
/// are a snapshot taken when `epoch` is written, so that comes first.
#[cfg(target_os = "linux")]
fn heap_stats() -> Option<dedupd::metrics::HeapStats> {
    use std::ffi::{CStr, c_void};
    // SAFETY: each call passes a NUL-terminated name and an old value of the
    // type and length the jemalloc manual gives for it (`epoch`: uint64_t,
    // read-write; `stats.*`: size_t, read-only).
    unsafe {
        let mut epoch: u64 = 1;
        let mut len = std::mem::size_of::<u64>();
        let epoch_ptr = (&raw mut epoch).cast::<c_void>();
        if mallctl(c"epoch".as_ptr(), epoch_ptr, &mut len, epoch_ptr, len) != 0 {
            return None;
        }
        let read = |name: &CStr| {
            let mut value: usize = 0;
            let mut len = std::mem::size_of::<usize>();
            let rc = mallctl(name.as_ptr(), (&raw mut value).cast(), &mut len, std::ptr::null_mut(), 0);
            (rc == 0).then_some(value as u64)
        };
        Some(dedupd::metrics::HeapStats { allocated: read(c"stats.allocated")?, resident: read(c"stats.resident")? })
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    dedupd::metrics::set_heap_source(heap_stats);
    match dedupd::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            dedupd::cli::logs::report_exit_error(&e);
            std::process::ExitCode::from(2)
        }
    }
}

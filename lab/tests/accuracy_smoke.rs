//! The accuracy harness end to end, as CI's smoke run: `dedupd-lab accuracy
//! --quick` writes its CSV files and its report. Running it from `cargo test`
//! reuses the test build instead of a second (release) build of the lab.

use std::path::Path;
use std::process::Command;

fn csv_rows(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().skip(1).filter(|l| !l.trim().is_empty()).count()
}

#[test]
fn quick_accuracy_run_writes_every_table() {
    let dir = std::env::temp_dir().join(format!("dedupd-lab-smoke-{}", std::process::id()));
    let (out, report) = (dir.join("csv"), dir.join("accuracy.md"));
    let status = Command::new(env!("CARGO_BIN_EXE_dedupd-lab"))
        .args(["accuracy", "--quick", "--out"])
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .status()
        .expect("run dedupd-lab");
    assert!(status.success(), "dedupd-lab accuracy --quick failed: {status}");

    let mut csvs: Vec<_> = std::fs::read_dir(&out)
        .expect("the CSV directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    csvs.sort();
    assert!(csvs.len() >= 5, "expected a CSV per experiment, got {csvs:?}");
    for csv in &csvs {
        assert!(csv_rows(csv) > 0, "{} has a header and no rows", csv.display());
    }
    let text = std::fs::read_to_string(&report).expect("the report");
    assert!(text.contains("--quick"), "the report names the quick run");
    assert!(text.lines().filter(|l| l.starts_with('|')).count() > 10, "the report has its tables:\n{text}");
    std::fs::remove_dir_all(&dir).ok();
}

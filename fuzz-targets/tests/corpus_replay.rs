//! Every committed fuzz input (`fuzz/corpus/<target>/*`: the seeds and the inputs the fuzzer
//! found) through its target, so what the fuzzer once found stays fixed in plain `cargo test`.

use std::path::Path;

#[test]
fn every_corpus_file_replays_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut replayed = 0;
    for (name, target) in fuzz_targets::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.expect("dir entry").path()).collect();
        files.sort();
        assert!(!files.is_empty(), "no corpus for {name}");
        for f in files {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                panic!("{name}: {} panics", f.display());
            }
            replayed += 1;
        }
    }
    assert!(replayed >= fuzz_targets::TARGETS.len());
}

#[test]
fn every_fuzz_binary_has_a_target_and_a_corpus() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut bins: Vec<String> = std::fs::read_dir(fuzz.join("src/bin"))
        .expect("fuzz/src/bin")
        .map(|e| e.expect("dir entry").path().file_stem().expect("file name").to_string_lossy().into_owned())
        .collect();
    bins.sort();
    let mut names: Vec<String> = fuzz_targets::TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(bins, names);
}

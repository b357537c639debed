//! Whether a file cargo built (a plugin's `lib<name>.so`) is older than the sources it was built
//! from, by the dep-info file cargo and rustc write next to it.
//!
//! `cargo test -p <crate>` builds only that package's targets: another package's cdylib (the
//! node plugins a live test loads into slurmd) is whatever an earlier build left in the target
//! dir, possibly from hours of commits ago. A live test run against it tests old code and fails
//! (or passes) for reasons the sources no longer have; the issue 24 failure on 26.05.3 was one.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The dep-info of `artifact`: `<dir>/lib<name>.d` (cargo's, every source including the path
/// dependencies'), else `<dir>/<name>.d` (rustc's in `deps/`, the crate's own sources). `None`:
/// neither exists (then freshness cannot be told).
pub fn dep_info(artifact: &Path) -> Option<PathBuf> {
    let dir = artifact.parent()?;
    let stem = artifact.file_stem()?.to_str()?;
    [Some(stem), stem.strip_prefix("lib")]
        .into_iter()
        .flatten()
        .map(|s| dir.join(format!("{s}.d")))
        .find(|p| p.is_file())
}

/// The sources listed in `dep_info_text` (Makefile rules `target: dep dep ...`, spaces in paths
/// escaped as `\ `); relative paths are taken from `base` (the workspace root, where cargo runs
/// rustc).
pub fn sources(dep_info_text: &str, base: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in dep_info_text.lines() {
        let Some(deps) = rule_deps(line) else { continue };
        for word in split_escaped(deps) {
            let p = PathBuf::from(word);
            let p = if p.is_relative() { base.join(p) } else { p };
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The part after a rule's unescaped `: ` (or a final `:`); `None` for other lines.
fn rule_deps(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    (0..bytes.len()).find_map(|i| {
        let colon = bytes[i] == b':' && (i == 0 || bytes[i - 1] != b'\\');
        let ends = bytes.get(i + 1).is_none_or(|b| *b == b' ');
        (colon && ends).then(|| &line[(i + 1).min(line.len())..])
    })
}

fn split_escaped(deps: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            ' ' | '\t' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The first of `artifact`'s sources modified after it was built, if any (sources that no
/// longer exist are left out: cargo rebuilds then too, but nothing here says it must).
pub fn newer_source(artifact: &Path, base: &Path) -> Option<PathBuf> {
    let built = modified(artifact)?;
    let text = std::fs::read_to_string(dep_info(artifact)?).ok()?;
    sources(&text, base).into_iter().find(|s| modified(s).is_some_and(|m| m > built))
}

fn modified(p: &Path) -> Option<SystemTime> {
    p.metadata().and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn set_mtime(p: &Path, t: SystemTime) {
        std::fs::File::options().append(true).open(p).expect("open").set_modified(t).expect("set mtime");
    }

    #[test]
    fn dep_info_rules_are_read_with_escaped_spaces_and_relative_paths() {
        let base = Path::new("/ws");
        let text = "/t/deps/libx.so: a/src/lib.rs /abs/b\\ c.rs\n\n/t/deps/libx.rlib: a/src/lib.rs\n\na/src/lib.rs:\n";
        assert_eq!(sources(text, base), vec![PathBuf::from("/ws/a/src/lib.rs"), PathBuf::from("/abs/b c.rs")]);
    }

    // Issue 24: the live test on 26.05.3 ran an acct_gather_energy/nvml built 6 hours before the
    // code that reads slurmctld's answers; nothing said so.
    #[test]
    fn an_artifact_older_than_a_source_of_its_dep_info_is_stale() {
        let dir = tempfile::tempdir().expect("temp dir");
        let deps = dir.path().join("deps");
        std::fs::create_dir(&deps).expect("deps");
        let src = dir.path().join("src.rs");
        std::fs::write(&src, "fn main() {}").expect("source");
        let so = deps.join("libplug.so");
        std::fs::write(&so, "elf").expect("artifact");
        // rustc's dep-info in deps/: the crate name without "lib".
        std::fs::write(deps.join("plug.d"), format!("{}: src.rs\n", so.display())).expect("dep-info");
        let now = SystemTime::now();
        set_mtime(&src, now - Duration::from_secs(3600));
        set_mtime(&so, now - Duration::from_secs(60));
        assert_eq!(newer_source(&so, dir.path()), None, "built after its source");
        set_mtime(&src, now);
        assert_eq!(newer_source(&so, dir.path()), Some(src.clone()), "the source changed after the build");
        // Through the lookup the live tests use.
        let e = crate::fresh_artifact(&so, dir.path()).expect_err("stale");
        assert!(e.contains("libplug.so") && e.contains("src.rs") && e.contains("cargo build"), "{e}");
        set_mtime(&so, now + Duration::from_secs(1));
        assert_eq!(crate::fresh_artifact(&so, dir.path()), Ok(so.clone()));
    }
}

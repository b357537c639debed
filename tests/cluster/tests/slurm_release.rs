//! `tools/slurm-release.sh`: builds another Slurm release from Debian's source package into a
//! cached prefix. The live test runs it for each release in `SLURM_ENERGY_RELEASES`
//! (space-separated, e.g. `24.11.5`): a second run must reuse the cache (fast, same answer), the
//! install must be that release, and apt must still offer no binary package of the added suites.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A cached release is checked, not rebuilt: well under this.
const CACHED_RUN_LIMIT: Duration = Duration::from_secs(10);

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/slurm-release.sh")
}

#[test]
fn release_script_takes_one_release_and_names_no_host() {
    let bad = Command::new("bash").arg(script()).arg("bogus").output().expect("bash");
    assert_eq!(bad.status.code(), Some(2), "a bad argument is a usage error");
    let none = Command::new("bash").arg(script()).output().expect("bash");
    assert_eq!(none.status.code(), Some(2), "the release is required");
    let help = Command::new("bash").arg(script()).arg("--help").output().expect("bash");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("deb-src"));
    // Where the archive serves no source: SchedMD's tarball, checked against SHA256SUMS.
    assert!(String::from_utf8_lossy(&help.stdout).contains("SHA256SUMS"), "--help names the checksum file");
    // Entries are derived from the machine's own sources: the project names no repository.
    for name in ["slurm-release.sh", "slurm-env.sh", "apt-src.sh"] {
        let path = script().with_file_name(name);
        let text = std::fs::read_to_string(&path).expect("read the script");
        assert!(!text.contains("://"), "tools/{name} must not name a repository host");
    }
}

/// `KEY=value` lines of the script's output.
fn answer(stdout: &[u8], key: &str) -> Option<String> {
    String::from_utf8_lossy(stdout).lines().find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
}

fn run(release: &str) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let out = Command::new("bash").arg(script()).arg(release).output().expect("bash");
    assert!(out.status.success(), "slurm-release.sh {release} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    (started.elapsed(), out.stdout)
}

#[test]
#[cfg_attr(live_skip, ignore = "needs root and a Slurm install (see tests/cluster/live_cfg.rs)")]
fn release_builds_are_cached_and_pinned() {
    if slurm_testcluster::skip_live_test("release_builds_are_cached_and_pinned") {
        return;
    }
    let releases = std::env::var("SLURM_ENERGY_RELEASES").unwrap_or_default();
    let releases: Vec<&str> = releases.split_whitespace().collect();
    if releases.is_empty() {
        return slurm_testcluster::skip_for("release_builds_are_cached_and_pinned", "SLURM_ENERGY_RELEASES names no release");
    }
    for release in releases {
        let (first, out) = run(release);
        let (second, again) = run(release);
        println!("slurm-release.sh {release}: {:.1} s, then {:.1} s", first.as_secs_f64(), second.as_secs_f64());
        assert_eq!(out, again, "a second run gives the same answer");
        assert!(second < CACHED_RUN_LIMIT, "a second run of {release} took {second:?}: the cache was not used");

        let prefix = answer(&out, "SLURM_ENERGY_SLURM_PREFIX").expect("prints SLURM_ENERGY_SLURM_PREFIX");
        let src = answer(&out, "SLURM_SRC_DIR").expect("prints SLURM_SRC_DIR");
        let v = Command::new(Path::new(&prefix).join("sbin/slurmctld")).arg("-V").output().expect("slurmctld -V");
        // `slurm 24.11.5`; Debian's own build says `slurm-wlm 22.05.8`.
        assert_eq!(String::from_utf8_lossy(&v.stdout).split_whitespace().nth(1), Some(release), "{prefix} runs {release}");
        let version_h = std::fs::read_to_string(Path::new(&src).join("slurm/slurm_version.h")).expect("configured tree");
        let mut parts = release.split('.').map(|p| p.parse::<u32>().expect("numeric release"));
        let (a, b, c) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let number = format!("#define SLURM_VERSION_NUMBER 0x{a:02x}{b:02x}{c:02x}");
        assert!(version_h.lines().any(|l| l.trim() == number), "{src} is configured for {release}");
        if prefix != "/usr" {
            for lib in ["accounting_storage_mysql.so", "auth_munge.so", "select_cons_tres.so"] {
                assert!(Path::new(&prefix).join("lib/slurm").join(lib).is_file(), "{prefix} lacks {lib}");
            }
        }
    }
    // The added suites serve sources only: apt's candidate for slurmctld stays the machine's own.
    let own = Command::new("dpkg-query").args(["-W", "-f", "${Version}", "slurmctld"]).output().expect("dpkg-query");
    let policy = Command::new("apt-cache").args(["policy", "slurmctld"]).output().expect("apt-cache");
    let candidate = String::from_utf8_lossy(&policy.stdout).lines().find_map(|l| l.trim().strip_prefix("Candidate: ").map(str::to_string));
    assert_eq!(candidate.as_deref(), Some(String::from_utf8_lossy(&own.stdout).trim()), "apt would install slurmctld from another suite");
}

/// SchedMD's tarball is used only when it matches its SHA256SUMS entry: a tampered one stops the
/// script before anything is unpacked or built (a release no archive serves, in a cache of its own).
#[test]
#[cfg_attr(live_skip, ignore = "needs root and a Slurm install (see tests/cluster/live_cfg.rs)")]
fn a_tarball_that_does_not_match_its_checksum_is_refused() {
    if slurm_testcluster::skip_live_test("a_tarball_that_does_not_match_its_checksum_is_refused") {
        return;
    }
    let sources = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("tempdir");
    std::fs::write(sources.path().join("slurm-99.1.1.tar.xz"), b"not the release").expect("write");
    let other = "0".repeat(64);
    std::fs::write(sources.path().join("SHA256SUMS"), format!("{other}  slurm-99.1.1.tar.xz\n")).expect("write");
    let out = Command::new("bash")
        .arg(script())
        .arg("99.1.1")
        .env("SLURM_ENERGY_SLURM_SOURCES", sources.path())
        .env("SLURM_ENERGY_CACHE", cache.path())
        .output()
        .expect("bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a tarball that does not match SHA256SUMS was used:\n{stderr}");
    assert!(stderr.contains("does not match its SHA256SUMS entry"), "{stderr}");
    assert!(!cache.path().join("slurm-99.1.1/src").exists(), "nothing is unpacked");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "no SLURM_SRC_DIR printed");
}

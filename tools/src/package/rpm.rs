//! Lays out and builds the RPM of [`crate::package`] for RHEL-family sites running SchedMD's
//! Slurm RPMs (`slurm.spec`): the same built files as the `.deb` ([`super::deb`]), in the
//! RPMs' plugin directory (`/usr/lib64/slurm`), with a spec made from
//! `packaging/rpm/slurm-energy-plugins.spec.in` and built by `rpmbuild -bb` (Debian's `rpm`
//! package). The files are staged before rpmbuild runs; the spec's `%install` only copies them.
//!
//! Also what the tests and `--rpmlint` check on the result: the GLIBC symbol versions the ELF
//! files need ([`glibc_needs`]), since a plugin built on Debian 12 (glibc 2.36) loads on RHEL 9
//! (2.34) only if it needs nothing newer.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::deb::{fill, files_under, install_elf, mkdir, read_packaging_file, set_dir_modes, stage_examples_and_man, write};
use super::{BuiltFiles, RELEASES, SlurmRelease};

/// Slurm's plugin directory in SchedMD's RPMs (`%{_libdir}/slurm` on x86_64 and aarch64).
pub const RPM_PLUGIN_DIR: &str = "/usr/lib64/slurm";

/// glibc of RHEL 9 (and Rocky, Alma 9) and of RHEL 8: the newest `GLIBC_` symbol version a
/// plugin may need to load there.
pub const RHEL9_GLIBC: (u32, u32) = (2, 34);
pub const RHEL8_GLIBC: (u32, u32) = (2, 28);

/// Everything [`assemble`] needs.
#[derive(Clone, Debug)]
pub struct RpmInputs {
    pub release: SlurmRelease,
    /// `0.1.0` and `1`, from the Debian changelog's `0.1.0-1` (one version for both formats).
    pub version: String,
    pub rpm_release: String,
    /// `x86_64`.
    pub arch: String,
    pub packager: String,
    /// The project's `packaging/`.
    pub packaging: PathBuf,
    /// The project's `etc/energy.toml` (installed as an example).
    pub energy_toml: PathBuf,
    pub source_note: String,
    pub built: BuiltFiles,
}

/// `0.1.0-1` -> (`0.1.0`, `1`); a version without a revision gets release `1`.
pub fn split_version(debian_version: &str) -> (String, String) {
    match debian_version.rsplit_once('-') {
        Some((v, r)) => (v.to_string(), r.to_string()),
        None => (debian_version.to_string(), "1".to_string()),
    }
}

/// The machine's architecture as RPM names it (`uname -m`).
pub fn host_arch() -> Result<String, String> {
    let out = Command::new("uname").arg("-m").output().map_err(|e| format!("run uname: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `Conflicts:` with the packages of every other series: they install the same files. (One
/// series may be in the table twice, a micro release per format; its package name is one.)
pub fn conflicts(release: &SlurmRelease) -> String {
    let mut others: Vec<String> = RELEASES.iter().filter(|r| r.series != release.series).map(|r| r.package_name()).collect();
    others.dedup();
    others.iter().map(|p| format!("Conflicts:      {p}")).collect::<Vec<_>>().join("\n")
}

/// The spec's `%files` list: every staged file, the docs and licence marked as such, the
/// package's own doc directory owned (the plugin directory belongs to `slurm`).
pub fn files_section(files: &[PathBuf], doc_dir: &str) -> String {
    let mut lines = vec![format!("%dir /{doc_dir}"), format!("%dir /{doc_dir}/examples")];
    for f in files {
        let path = format!("/{}", f.display());
        if path.starts_with("/usr/share/licenses/") {
            lines.push(format!("%license {path}"));
        } else if path.starts_with(&format!("/{doc_dir}/")) {
            lines.push(format!("%doc {path}"));
        } else {
            lines.push(path);
        }
    }
    lines.join("\n")
}

/// Builds the RPM into `out_dir`; returns its path.
pub fn assemble(i: &RpmInputs, out_dir: &Path) -> Result<PathBuf, String> {
    let r = &i.release;
    let pkg = r.package_name();
    mkdir(out_dir)?;
    let work = out_dir.join(format!(".rpm-{pkg}"));
    if work.exists() {
        fs::remove_dir_all(&work).map_err(|e| format!("remove the old {}: {e}", work.display()))?;
    }
    let stage = work.join("stage");
    let doc = format!("usr/share/doc/{pkg}");
    let fields: Vec<(&str, &str)> = vec![
        ("PACKAGE", &pkg),
        ("VERSION", &i.version),
        ("SERIES", r.series),
        ("SLURM_RELEASE", r.upstream),
        ("PLUGIN_DIR", RPM_PLUGIN_DIR),
        ("DOC_DIR", &doc),
        ("MAINTAINER", &i.packager),
        ("SOURCE_NOTE", &i.source_note),
    ];
    let template = |rel: &str| -> Result<String, String> { fill(&read_packaging_file(&i.packaging, rel)?, &fields, &format!("packaging/{rel}")) };

    // Plugins and CLI, stripped as for the .deb.
    for (src, name) in &i.built.plugins {
        install_elf(src, &stage.join(RPM_PLUGIN_DIR.trim_start_matches('/')).join(name), 0o755, true)?;
    }
    install_elf(&i.built.cli, &stage.join("usr/bin/slurm-energy"), 0o755, false)?;

    // Docs, licence, examples, man pages.
    write(&stage.join(&doc).join("README.RPM"), template("rpm/README.RPM.in")?.as_bytes(), 0o644)?;
    write(&stage.join("usr/share/licenses").join(&pkg).join("copyright"), template("debian/copyright")?.as_bytes(), 0o644)?;
    stage_examples_and_man(&stage, &doc, &i.packaging, &fields, &i.energy_toml, &i.built, &i.version)?;
    set_dir_modes(&stage)?;

    // The spec.
    let files = files_under(&stage)?;
    let stage_abs = fs::canonicalize(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    let stage_text = stage_abs.display().to_string();
    let description = template("rpm/description.in")?;
    let files_text = files_section(&files, &doc);
    let conflicts_text = conflicts(r);
    let date = changelog_date()?;
    let spec_fields: Vec<(&str, &str)> = vec![
        ("PACKAGE", &pkg),
        ("VERSION", &i.version),
        ("RELEASE", &i.rpm_release),
        ("SERIES", r.series),
        ("SLURM_RELEASE", r.upstream),
        ("ARCH", &i.arch),
        ("URL", "https://slurm.schedmd.com/"),
        ("STAGE", &stage_text),
        ("CONFLICTS", &conflicts_text),
        ("DESCRIPTION", description.trim_end()),
        ("FILES", &files_text),
        ("CHANGELOG_DATE", &date),
        ("PACKAGER", &i.packager),
        ("SOURCE_NOTE", &i.source_note),
    ];
    let spec_in = "rpm/slurm-energy-plugins.spec.in";
    let spec = fill(&read_packaging_file(&i.packaging, spec_in)?, &spec_fields, &format!("packaging/{spec_in}"))?;
    let spec_path = work.join(format!("{pkg}.spec"));
    write(&spec_path, spec.as_bytes(), 0o644)?;

    // rpmbuild in a top dir of its own; the package goes straight to out_dir.
    let top = fs::canonicalize(&work).map_err(|e| format!("{}: {e}", work.display()))?.join("top");
    mkdir(&top)?;
    let out_abs = fs::canonicalize(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let out = Command::new("rpmbuild")
        .arg("-bb")
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .arg("--define")
        .arg(format!("_rpmdir {}", out_abs.display()))
        .arg("--define")
        .arg("_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm")
        .arg("--define")
        .arg(format!("packager {}", i.packager))
        .arg(&spec_path)
        .output()
        .map_err(|e| format!("run rpmbuild: {e} (apt-get install rpm)"))?;
    if !out.status.success() {
        return Err(format!("rpmbuild -bb {} failed ({}):\n{}", spec_path.display(), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let rpm = out_abs.join(format!("{pkg}-{}-{}.{}.rpm", i.version, i.rpm_release, i.arch));
    if !rpm.is_file() {
        return Err(format!("rpmbuild reported success but {} is not there", rpm.display()));
    }
    fs::remove_dir_all(&work).map_err(|e| format!("remove {}: {e}", work.display()))?;
    Ok(rpm)
}

/// Today as an RPM changelog wants it (`Fri Nov 27 2026`), in UTC.
fn changelog_date() -> Result<String, String> {
    let out = Command::new("date").args(["-u", "+%a %b %d %Y"]).output().map_err(|e| format!("run date: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The `GLIBC_x.y` symbol versions an ELF file needs (`objdump -T`: its dynamic symbols that are
/// undefined, with their version), sorted, each once.
pub fn glibc_needs(elf: &Path) -> Result<Vec<(u32, u32)>, String> {
    let out = Command::new("objdump").arg("-T").arg(elf).output().map_err(|e| format!("run objdump: {e} (apt-get install binutils)"))?;
    if !out.status.success() {
        return Err(format!("objdump -T {} failed ({})", elf.display(), out.status));
    }
    let mut needs: Vec<(u32, u32)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("*UND*"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.trim_start_matches('(').trim_end_matches(')').strip_prefix("GLIBC_").map(str::to_string)))
        .filter_map(|v| {
            let mut parts = v.split('.');
            Some((parts.next()?.parse().ok()?, parts.next().unwrap_or("0").parse().ok()?))
        })
        .collect();
    needs.sort_unstable();
    needs.dedup();
    Ok(needs)
}

/// What rpmlint said about a package.
#[derive(Clone, Debug)]
pub struct RpmlintReport {
    pub output: String,
    pub errors: u32,
    pub warnings: u32,
}

/// rpmlint on `rpm` with the project's `rpmlintrc` (its filters, each with its reason); the
/// counts from rpmlint's summary line (`1 packages and 0 specfiles checked; 0 errors, 2 warnings`).
pub fn rpmlint(rpm: &Path, rpmlintrc: &Path) -> Result<RpmlintReport, String> {
    let out = Command::new("rpmlint").arg("-r").arg(rpmlintrc).arg(rpm).output().map_err(|e| format!("run rpmlint: {e} (apt-get install rpmlint)"))?;
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let summary = output.lines().rev().find(|l| l.contains("checked;")).ok_or_else(|| format!("rpmlint printed no summary ({}):\n{output}", out.status))?;
    let count = |what: &str| -> Option<u32> {
        let tail = summary.split("checked;").nth(1)?;
        tail.split(',').find(|p| p.contains(what))?.split_whitespace().next()?.parse().ok()
    };
    let errors = count("error").ok_or_else(|| format!("rpmlint summary without an error count: {summary}"))?;
    let warnings = count("warning").unwrap_or(0);
    Ok(RpmlintReport { output, errors, warnings })
}

/// ELF files (path in the package) with the newest GLIBC version (major, minor) each needs.
pub type GlibcNeeds = Vec<(String, (u32, u32))>;

/// Each ELF file of the package (unpacked with rpm2cpio) and the newest GLIBC version it needs.
pub fn glibc_report(rpm: &Path) -> Result<GlibcNeeds, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("create a scratch dir: {e}"))?;
    let script = format!("rpm2cpio '{}' | cpio -idm --quiet", rpm.display());
    let status = Command::new("sh").arg("-c").arg(&script).current_dir(dir.path()).status().map_err(|e| format!("run rpm2cpio: {e}"))?;
    if !status.success() {
        return Err(format!("{script} failed ({status})"));
    }
    let mut report = Vec::new();
    for rel in files_under(dir.path())? {
        let path = dir.path().join(&rel);
        let is_elf = fs::read(&path).map(|b| b.starts_with(b"\x7fELF")).unwrap_or(false);
        if is_elf && let Some(newest) = glibc_needs(&path)?.last() {
            report.push((format!("/{}", rel.display()), *newest));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::PackageFormat;

    #[test]
    fn versions_split_into_version_and_release() {
        assert_eq!(split_version("0.1.0-1"), ("0.1.0".into(), "1".into()));
        assert_eq!(split_version("0.1.0"), ("0.1.0".into(), "1".into()));
    }

    #[test]
    fn each_release_conflicts_with_every_other_series_once() {
        for series in ["22.05", "24.11", "25.11", "26.05"] {
            let r = SlurmRelease::find(series, PackageFormat::Rpm).expect(series);
            let c = conflicts(&r);
            let want: Vec<String> =
                ["22.05", "24.11", "25.11", "26.05"].iter().filter(|s| **s != series).map(|s| format!("Conflicts:      slurm-energy-plugins-{s}")).collect();
            assert_eq!(c, want.join("\n"), "{series}");
        }
    }

    #[test]
    fn the_files_section_marks_docs_and_licence() {
        let doc = "usr/share/doc/p";
        let files = vec![PathBuf::from("usr/lib64/slurm/sched_energy.so"), PathBuf::from("usr/share/doc/p/README.RPM"), PathBuf::from("usr/share/licenses/p/copyright")];
        let s = files_section(&files, doc);
        assert!(s.contains("\n/usr/lib64/slurm/sched_energy.so"), "{s}");
        assert!(s.contains("%doc /usr/share/doc/p/README.RPM"), "{s}");
        assert!(s.contains("%license /usr/share/licenses/p/copyright"), "{s}");
        assert!(!s.contains("%dir /usr/lib64/slurm"), "the plugin dir is slurm's: {s}");
    }

    #[test]
    fn glibc_needs_reads_this_test_binary() {
        let exe = std::env::current_exe().expect("test binary");
        let needs = glibc_needs(&exe).expect("objdump");
        assert!(!needs.is_empty(), "a Rust binary needs some glibc symbol");
        assert!(needs.iter().all(|&(major, _)| major == 2), "{needs:?}");
    }
}

//! The RPMs of `slurm-energy package --format rpm` (issue 22): built on this machine (rpmbuild
//! from Debian's `rpm` package) for Slurm 22.05.8 and for SchedMD's 25.11.7 and 26.05.3, then
//! each checked as a RHEL-family site would meet it:
//!
//! - its files (`rpm -qlp`): the five plugins in SchedMD's plugin directory `/usr/lib64/slurm`,
//!   the CLI, the man pages, docs, examples and licence, nothing else;
//! - its dependencies (`rpm -qRp`): `slurm = <micro release>` (SchedMD's package of exactly that
//!   release) and glibc symbol versions no newer than RHEL 9's 2.34 (the ELF files' own
//!   `GLIBC_` needs are checked too, and RHEL 8's 2.28 is reported); its conflicts (`rpm
//!   -qp --conflicts`): every other series' package; each plugin's `plugin_version` is that
//!   release's `SLURM_VERSION_NUMBER` (what Slurm checks at load time);
//! - rpmlint: no error (each filter in packaging/rpm/slurm-energy-plugins.rpmlintrc has its
//!   reason);
//! - installation with `rpm --root` into a scratch root holding a stand-in of SchedMD's `slurm`
//!   package: refused beside `slurm` of another release (the requirement named), accepted beside
//!   its own with the files in place and `rpm -V` clean; refused with a file conflict when that
//!   `slurm` was built `--with nvml` (its own gpu_nvml.so).
//!
//! Needs root (rpm --root), rpmbuild, rpmlint and the release's configured Slurm source tree:
//! for 22.05.8 `SLURM_SRC_DIR` or the one tools/slurm-env.sh prepares; for 25.11.7 and 26.05.3
//! `SLURM_SRC_DIR` when it is that release, else the tree tools/slurm-release.sh cached under
//! `$SLURM_ENERGY_CACHE` (default /var/cache/slurm-energy; CI builds them first). Skipped
//! (printed) without them, failed under `CI=true`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use slurm_testcluster::{skip_for, skip_live_test};
use tools::demo::default_project_dir;
use tools::package::{PLUGINS, PackageFormat, PackageOptions, RELEASES, SlurmRelease, package, tree_release};
use tools::package::rpm::{RHEL8_GLIBC, RHEL9_GLIBC, RPM_PLUGIN_DIR, glibc_report, rpmlint};

/// One test at a time: each builds the plugins in release mode, and two at once on a small
/// machine only slow each other.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(out.status.success(), "{cmd:?} failed ({}): {}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A stand-in of SchedMD's `slurm` RPM of `version`: it owns the plugin directory, holds one
/// plugin of Slurm's, and `gpu_nvml.so` when built `--with nvml`.
fn stub_slurm(dir: &Path, version: &str, with_nvml: bool) -> PathBuf {
    let arch = tools::package::rpm::host_arch().expect("arch");
    let nvml_install = if with_nvml { format!("echo stock > %{{buildroot}}{RPM_PLUGIN_DIR}/gpu_nvml.so") } else { String::new() };
    let nvml_file = if with_nvml { format!("{RPM_PLUGIN_DIR}/gpu_nvml.so") } else { String::new() };
    let name = if with_nvml { "slurm-nvml" } else { "slurm" };
    let spec = format!(
        "%global debug_package %{{nil}}\n%global __os_install_post %{{nil}}\nName: slurm\nVersion: {version}\nRelease: 1.el9\nSummary: stand-in of SchedMD's slurm package\nLicense: GPL-2.0-or-later\nBuildArch: {arch}\n\
         %description\nStand-in.\n%install\nmkdir -p %{{buildroot}}{RPM_PLUGIN_DIR}\necho stock > %{{buildroot}}{RPM_PLUGIN_DIR}/select_cons_tres.so\n{nvml_install}\n\
         %files\n%dir {RPM_PLUGIN_DIR}\n{RPM_PLUGIN_DIR}/select_cons_tres.so\n{nvml_file}\n"
    );
    let work = dir.join(format!("stub-{name}-{version}"));
    std::fs::create_dir_all(&work).expect("stub dir");
    let spec_path = work.join("slurm.spec");
    std::fs::write(&spec_path, spec).expect("write stub spec");
    run_ok(
        Command::new("rpmbuild")
            .arg("-bb")
            .arg("--define")
            .arg(format!("_topdir {}", work.join("top").display()))
            .arg("--define")
            .arg(format!("_rpmdir {}", work.display()))
            .arg("--define")
            .arg("_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm")
            .arg(&spec_path),
    );
    work.join(format!("slurm-{version}-1.el9.{arch}.rpm"))
}

/// The `plugin_version` an ELF plugin exports (Slurm compares it with its own
/// `SLURM_VERSION_NUMBER`): its dynamic symbol's address (`objdump -T`), then the four bytes
/// there (`objdump -s`, little-endian on x86_64 and aarch64).
fn plugin_version(elf: &Path) -> Option<u32> {
    let symbols = run_ok(Command::new("objdump").arg("-T").arg(elf));
    let line = symbols.lines().find(|l| l.split_whitespace().last() == Some("plugin_version"))?;
    let addr = u64::from_str_radix(line.split_whitespace().next()?, 16).ok()?;
    let dump = run_ok(Command::new("objdump").args(["-s", "-j", ".rodata"]).arg(format!("--start-address={addr:#x}")).arg(format!("--stop-address={:#x}", addr + 4)).arg(elf));
    let bytes = dump.lines().rev().find(|l| l.trim_start().starts_with(&format!("{addr:x} ")))?.split_whitespace().nth(1)?.to_string();
    let raw = u32::from_str_radix(&bytes, 16).ok()?;
    Some(raw.swap_bytes())
}

/// `25.11.7` -> 0x190b07, as `SLURM_VERSION_NUMBER`.
fn version_number(release: &str) -> u32 {
    let parts: Vec<u32> = release.split('.').map(|p| p.parse().expect("numeric release")).collect();
    (parts[0] << 16) | (parts[1] << 8) | parts[2]
}

/// A scratch root with an empty rpm database and `stub` installed in it.
fn root_with(dir: &Path, name: &str, stub: &Path) -> PathBuf {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).expect("root");
    run_ok(Command::new("rpm").arg("--root").arg(&root).arg("--initdb"));
    // The stand-in needs nothing; rpm's own dependencies on /bin/sh etc. are not in this root.
    run_ok(Command::new("rpm").arg("--root").arg(&root).args(["-i", "--nodeps"]).arg(stub));
    root
}

/// The unmet dependencies `rpm -i --test` names for `rpm` in `root` (one line each).
fn unmet(root: &Path, rpm: &Path) -> Vec<String> {
    let out = output(Command::new("rpm").arg("--root").arg(root).args(["-i", "--test"]).arg(rpm));
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| l.contains("is needed by")).map(|l| l.trim().to_string()).collect()
}

/// The tools the checks need, or the reason to skip.
fn missing_tool() -> Option<String> {
    ["rpmbuild", "rpmlint", "rpm2cpio", "objdump"]
        .into_iter()
        .find(|t| tools::package::which(t).is_none())
        .map(|t| format!("{t} is not installed (apt-get install rpm rpmlint binutils)"))
}

/// `SLURM_SRC_DIR` when it is a configured tree of exactly `release`.
fn src_from_env(release: &SlurmRelease) -> Option<PathBuf> {
    std::env::var_os("SLURM_SRC_DIR").map(PathBuf::from).filter(|src| tree_release(src).ok().as_deref() == Some(release.upstream))
}

/// The configured tree of `release` that tools/slurm-release.sh cached, if it did.
fn cached_src(release: &SlurmRelease) -> Option<PathBuf> {
    let cache = std::env::var_os("SLURM_ENERGY_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/cache/slurm-energy"));
    let src = cache.join(format!("slurm-{}", release.upstream)).join("src");
    (tree_release(&src).ok().as_deref() == Some(release.upstream)).then_some(src)
}

#[test]
fn rpm_22_05_has_its_files_requires_slurm_of_its_release_and_installs_into_a_scratch_root() {
    const NAME: &str = "rpm_22_05_has_its_files_requires_slurm_of_its_release_and_installs_into_a_scratch_root";
    if skip_live_test(NAME) {
        return;
    }
    if let Some(why) = missing_tool() {
        return skip_for(NAME, &why);
    }
    let _serial = serial();
    let release = SlurmRelease::find("22.05", PackageFormat::Rpm).expect("22.05");
    // Without a 22.05.8 tree in SLURM_SRC_DIR, tools/slurm-env.sh prepares the system's.
    check_rpm(NAME, release, src_from_env(&release));
}

#[test]
fn rpm_25_11_requires_schedmds_slurm_25_11_7_and_installs_into_a_scratch_root() {
    const NAME: &str = "rpm_25_11_requires_schedmds_slurm_25_11_7_and_installs_into_a_scratch_root";
    check_schedmd_release(NAME, "25.11", "25.11.7");
}

#[test]
fn rpm_26_05_requires_schedmds_slurm_26_05_3_and_installs_into_a_scratch_root() {
    const NAME: &str = "rpm_26_05_requires_schedmds_slurm_26_05_3_and_installs_into_a_scratch_root";
    check_schedmd_release(NAME, "26.05", "26.05.3");
}

/// `--format rpm --slurm <series>` is `upstream`, built against its cached tree (skipped, or
/// failed under CI, without one: building Slurm is tools/slurm-release.sh's job, done before).
fn check_schedmd_release(name: &str, series: &str, upstream: &str) {
    if skip_live_test(name) {
        return;
    }
    if let Some(why) = missing_tool() {
        return skip_for(name, &why);
    }
    let release = SlurmRelease::find(series, PackageFormat::Rpm).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(release.upstream, upstream, "--format rpm --slurm {series}");
    let Some(src) = src_from_env(&release).or_else(|| cached_src(&release)) else {
        return skip_for(name, &format!("no configured Slurm {upstream} tree (SLURM_SRC_DIR, or `bash tools/slurm-release.sh {upstream}` to cache one)"));
    };
    let _serial = serial();
    check_rpm(name, release, Some(src));
}

/// Builds the RPM of `release` (against `src`, or the tree the project's scripts prepare) and
/// checks it as the module says.
fn check_rpm(name: &str, release: SlurmRelease, src: Option<PathBuf>) {
    let project = default_project_dir();
    let mut opts = PackageOptions::new(&project, release);
    opts.format = PackageFormat::Rpm;
    opts.slurm_src = src;
    let scratch = tempfile::Builder::new().prefix("slurm-energy-rpm-").tempdir().expect("scratch");
    opts.out_dir = scratch.path().join("out");
    let rpm = package(&opts).unwrap_or_else(|e| panic!("package --format rpm: {e}"));
    let pkg = release.package_name();
    assert_eq!(rpm.file_name().and_then(|n| n.to_str()).map(|n| n.starts_with(&format!("{pkg}-"))), Some(true), "{}", rpm.display());

    // Files.
    let listed: BTreeSet<String> = run_ok(Command::new("rpm").arg("-qlp").arg(&rpm)).lines().map(str::to_string).collect();
    let doc = format!("/usr/share/doc/{pkg}");
    let mut want: BTreeSet<String> = PLUGINS.iter().map(|(_, _, name)| format!("{RPM_PLUGIN_DIR}/{name}")).collect();
    for f in [
        "/usr/bin/slurm-energy".to_string(),
        "/usr/share/man/man1/slurm-energy.1.gz".into(),
        "/usr/share/man/man7/slurm-energy-hints.7.gz".into(),
        format!("/usr/share/licenses/{pkg}/copyright"),
        doc.clone(),
        format!("{doc}/README.RPM"),
        format!("{doc}/examples"),
        format!("{doc}/examples/energy.toml"),
        format!("{doc}/examples/plugstack.conf"),
        format!("{doc}/examples/slurm.conf"),
    ] {
        want.insert(f);
    }
    assert_eq!(listed, want, "rpm -qlp {}", rpm.display());

    // Requires: SchedMD's slurm of exactly this release, and glibc no newer than RHEL 9's.
    let requires = run_ok(Command::new("rpm").arg("-qRp").arg(&rpm));
    println!("rpm -qRp:\n{requires}");
    assert!(requires.lines().any(|l| l.trim() == format!("slurm = {}", release.upstream)), "{requires}");
    let conflicts = run_ok(Command::new("rpm").args(["-qp", "--conflicts"]).arg(&rpm));
    println!("rpm -qp --conflicts:\n{conflicts}");
    let mut want_conflicts: Vec<String> = RELEASES.iter().filter(|r| r.series != release.series).map(|r| r.package_name()).collect();
    want_conflicts.dedup();
    assert_eq!(conflicts.lines().map(str::trim).collect::<Vec<_>>(), want_conflicts, "rpm -qp --conflicts {}", rpm.display());
    let glibc_required: Vec<(u32, u32)> = requires
        .lines()
        .filter_map(|l| l.split("(GLIBC_").nth(1)?.split(')').next().map(str::to_string))
        .filter_map(|v| {
            let mut p = v.split('.');
            Some((p.next()?.parse().ok()?, p.next().unwrap_or("0").parse().ok()?))
        })
        .collect();
    assert!(!glibc_required.is_empty(), "rpmbuild found no glibc requirement: {requires}");
    let newest_required = glibc_required.iter().max().copied().unwrap_or((0, 0));
    let per_file = glibc_report(&rpm).expect("glibc report");
    for (file, newest) in &per_file {
        println!("{file}: needs GLIBC_{}.{} (RHEL 9: {}.{}, RHEL 8: {}.{}{})", newest.0, newest.1, RHEL9_GLIBC.0, RHEL9_GLIBC.1, RHEL8_GLIBC.0, RHEL8_GLIBC.1, if *newest > RHEL8_GLIBC { ": too new for RHEL 8" } else { "" });
    }
    assert_eq!(per_file.len(), PLUGINS.len() + 1, "every plugin and the CLI are ELF files: {per_file:?}");
    assert!(newest_required <= RHEL9_GLIBC, "the RPM requires GLIBC_{}.{}, newer than RHEL 9's 2.34: {requires}", newest_required.0, newest_required.1);
    assert!(per_file.iter().all(|(_, n)| *n <= RHEL9_GLIBC), "{per_file:?}");

    // The plugins are built for exactly this release (what Slurm checks when it loads them).
    let unpacked = scratch.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).expect("unpack dir");
    run_ok(Command::new("sh").arg("-c").arg(format!("rpm2cpio '{}' | cpio -idm --quiet", rpm.display())).current_dir(&unpacked));
    for (_, _, name) in PLUGINS {
        let elf = unpacked.join(RPM_PLUGIN_DIR.trim_start_matches('/')).join(name);
        let found = plugin_version(&elf);
        println!("{name}: plugin_version {found:x?}");
        assert_eq!(found, Some(version_number(release.upstream)), "{name}'s plugin_version is not Slurm {}'s", release.upstream);
    }

    // rpmlint.
    let lint = rpmlint(&rpm, &project.join("packaging/rpm/slurm-energy-plugins.rpmlintrc")).expect("rpmlint");
    println!("rpmlint: {} errors, {} warnings\n{}", lint.errors, lint.warnings, lint.output);
    assert_eq!(lint.errors, 0, "{}", lint.output);

    // Installation into scratch roots with a stand-in of SchedMD's slurm.
    let stubs = scratch.path().join("stubs");
    let other = RELEASES.iter().find(|r| r.schedmd_rpm && r.series != release.series).expect("another release").upstream;
    let wrong = root_with(scratch.path(), &format!("root-{other}"), &stub_slurm(&stubs, other, false));
    let needed = unmet(&wrong, &rpm);
    assert!(needed.iter().any(|l| l.starts_with(&format!("slurm = {} is needed by {pkg}", release.upstream))), "installing beside slurm {other}: {needed:?}");
    let right = root_with(scratch.path(), &format!("root-{}", release.upstream), &stub_slurm(&stubs, release.upstream, false));
    let needed = unmet(&right, &rpm);
    assert!(!needed.iter().any(|l| l.starts_with("slurm ")), "beside slurm {}: {needed:?}", release.upstream);
    // The scratch root has no glibc package: install without the dependency check, which the
    // two answers above have done for slurm.
    run_ok(Command::new("rpm").arg("--root").arg(&right).args(["-i", "--nodeps"]).arg(&rpm));
    for (_, _, name) in PLUGINS {
        assert!(right.join(RPM_PLUGIN_DIR.trim_start_matches('/')).join(name).is_file(), "{name} not installed");
    }
    assert!(right.join(RPM_PLUGIN_DIR.trim_start_matches('/')).join("select_cons_tres.so").is_file(), "slurm's own plugin is still there");
    let verify = output(Command::new("rpm").arg("--root").arg(&right).args(["-V", "--nodeps", &pkg]));
    assert!(verify.status.success() && verify.stdout.is_empty(), "rpm -V {pkg}: {}", String::from_utf8_lossy(&verify.stdout));
    run_ok(Command::new("rpm").arg("--root").arg(&right).args(["-e", "--nodeps", &pkg]));
    assert!(!right.join(RPM_PLUGIN_DIR.trim_start_matches('/')).join("sched_energy.so").exists(), "erased");
    assert!(right.join(RPM_PLUGIN_DIR.trim_start_matches('/')).join("select_cons_tres.so").is_file(), "slurm's plugin survives the erase");

    // A slurm built --with nvml owns gpu_nvml.so: rpm refuses with a file conflict.
    let nvml = root_with(scratch.path(), "root-nvml", &stub_slurm(&stubs, release.upstream, true));
    let out = output(Command::new("rpm").arg("--root").arg(&nvml).args(["-i", "--nodeps"]).arg(&rpm));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("gpu_nvml.so") && err.contains("conflicts with file from package slurm"), "{err}");
    println!("{name}: {}", rpm.display());
}

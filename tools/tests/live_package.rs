//! The Debian packages of `slurm-energy package` (issue 9).
//!
//! - 22.05: builds the package, installs it with `apt-get install ./….deb` on this Debian 12
//!   machine, starts a cluster whose `PluginDir` is Debian's plugin directory alone (the
//!   installed plugins, no cargo path), with the installed example plugstack.conf and
//!   energy.toml, runs hinted jobs under sched/energy with gpu/nvml and the energy plugin on fake
//!   GPUs, and checks the decision records and the GPU energy in sacct; compares the installed
//!   man page's options with what `sbatch --help` lists from the installed plugin; then purges
//!   the package and checks that the plugin directory is as before.
//! - 24.11: builds the package and checks its contents, Depends and lintian.
//! - 26.05: `package --slurm 26.05` fails with the reason (the archive serves no source of
//!   slurm-wlm 26.05.5-1), or, once the archive serves it, gives a package that passes the same
//!   checks as 24.11.
//!
//! The 22.05 test changes the system (a package in /usr/lib/x86_64-linux-gnu/slurm-wlm and
//! /usr/bin) for its duration: another test that counts on that directory holding Slurm's
//! plugins only must not run at the same time. Cargo runs test binaries one after the other, and
//! the other tests put their own plugin dir first in `PluginDir`, so they load their own builds
//! even then.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_for, skip_live_test, slurm_release};
use tools::demo::{DEMO_GPUS_PER_NODE, DEMO_NODES, FakeGpuSite, GpuPluginFiles, default_project_dir, demo_energy_toml};
use tools::package::{PLUGINS, PackageFormat, PackageOptions, SlurmRelease, package};
use tools::package::deb::plugin_dir;
use tools::package::{lintian as package_lintian, man as package_man};

/// One test at a time: each builds the plugins in release mode (two cargo builds at once on a
/// small machine slow the 22.05 cluster's jobs), and only one may hold the package installed.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed ({}): {}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn multiarch() -> String {
    run_ok(Command::new("dpkg-architecture").arg("-qDEB_HOST_MULTIARCH")).trim().to_string()
}

/// The package of `release`, built into `target/packages` of the project. A configured tree in
/// `SLURM_SRC_DIR` of exactly that release is used as is (CI's); else the project's scripts
/// prepare it.
fn build_package(release: SlurmRelease) -> Result<PathBuf, String> {
    let project = default_project_dir();
    let mut opts = PackageOptions::new(&project, release);
    if let Some(src) = std::env::var_os("SLURM_SRC_DIR").map(PathBuf::from)
        && tools::package::tree_release(&src).ok().as_deref() == Some(release.upstream)
    {
        opts.slurm_src = Some(src);
    }
    package(&opts)
}

/// Checks what every package must hold, whatever the release: file list, modes and owners,
/// Depends, md5sums, man page, and lintian (no error, no warning; overrides listed).
fn check_package(deb: &Path, release: SlurmRelease) {
    let pkg = release.package_name();
    let field = |name: &str| run_ok(Command::new("dpkg-deb").arg("-f").arg(deb).arg(name)).trim().to_string();
    assert_eq!(field("Package"), pkg);
    let depends = field("Depends");
    println!("{pkg}: Depends: {depends}");
    assert!(depends.ends_with(&release.depends()), "Depends of {pkg} does not pin Slurm {}: {depends}", release.upstream);
    assert!(depends.contains("libc6 (>= "), "no libc6 in Depends: {depends}");
    assert_eq!(field("Provides"), "slurm-energy-plugins");
    assert!(field("Conflicts").contains("slurm-energy-plugins") && field("Conflicts").contains("slurm-wlm-nvml-plugin"));

    // File list: owner, mode, place.
    let listing = run_ok(Command::new("dpkg-deb").arg("-c").arg(deb));
    let mut entries = std::collections::BTreeMap::new();
    for line in listing.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(cols.len() >= 6, "odd dpkg-deb -c line: {line}");
        assert_eq!(cols[1], "root/root", "not root-owned: {line}");
        entries.insert(cols[5].trim_start_matches('.').to_string(), cols[0].to_string());
    }
    let dir = plugin_dir(&multiarch());
    let doc = format!("/usr/share/doc/{pkg}");
    let mut want: Vec<(String, &str)> = PLUGINS.iter().map(|(_, _, name)| (format!("{dir}/{name}"), "-rw-r--r--")).collect();
    want.push(("/usr/bin/slurm-energy".into(), "-rwxr-xr-x"));
    for f in ["copyright", "changelog.Debian.gz", "README.Debian", "examples/energy.toml", "examples/plugstack.conf", "examples/slurm.conf"] {
        want.push((format!("{doc}/{f}"), "-rw-r--r--"));
    }
    want.push(("/usr/share/man/man7/slurm-energy-hints.7.gz".into(), "-rw-r--r--"));
    want.push(("/usr/share/man/man1/slurm-energy.1.gz".into(), "-rw-r--r--"));
    for (path, mode) in &want {
        assert_eq!(entries.get(path).map(String::as_str), Some(*mode), "{path} missing or with another mode in {pkg}:\n{listing}");
    }
    for (path, mode) in &entries {
        if mode.starts_with('d') {
            assert_eq!(mode, "drwxr-xr-x", "{path}");
        }
        assert!(!path.starts_with("/etc/"), "{pkg} ships {path}: configuration is the site's (examples go under {doc})");
    }

    // md5sums match the files; the example plugstack.conf names the installed plugin.
    let x = tempfile::tempdir().expect("tempdir");
    run_ok(Command::new("dpkg-deb").arg("-R").arg(deb).arg(x.path()));
    let md5 = run_ok(Command::new("md5sum").args(["-c", "--quiet", "DEBIAN/md5sums"]).current_dir(x.path()));
    assert!(md5.trim().is_empty(), "{md5}");
    let sums = std::fs::read_to_string(x.path().join("DEBIAN/md5sums")).expect("md5sums");
    let regular_files = entries.iter().filter(|(_, m)| m.starts_with('-')).count();
    assert_eq!(sums.lines().count(), regular_files, "md5sums does not cover every file:\n{sums}");
    let plugstack = std::fs::read_to_string(x.path().join(doc.trim_start_matches('/')).join("examples/plugstack.conf")).expect("plugstack example");
    assert!(plugstack.lines().any(|l| l == format!("required {dir}/spank_energy.so max_defer=12h max_slowdown=3.0")), "{plugstack}");
    let man = run_ok(Command::new("gzip").arg("-dc").arg(x.path().join("usr/share/man/man7/slurm-energy-hints.7.gz")));
    let documented = package_man::options_in_page(&man);
    println!("{pkg}: slurm-energy-hints(7) documents {documented:?}");
    assert!(documented.len() >= 6 && documented.contains(&"energy-policy".to_string()), "{man}");
    assert!(man.contains(&format!("Slurm {}", release.upstream)), "man page not for Slurm {}", release.upstream);

    // lintian.
    let findings = package_lintian::run(deb).unwrap_or_else(|e| panic!("{e}"));
    print!("{pkg}: {}", package_lintian::format(&findings));
    assert!(findings.errors.is_empty(), "lintian errors on {pkg}: {:?}", findings.errors);
    assert!(findings.warnings.is_empty(), "lintian warnings on {pkg} (fix, or override with a reason in packaging/debian/lintian-overrides.in): {:?}", findings.warnings);
}

fn is_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", pkg])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn apt_get(args: &[&str]) -> std::process::Output {
    Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap_or_else(|e| panic!("run apt-get: {e}"))
}

/// The installed package; purged when dropped (also when the test fails), so that the machine
/// is left as it was.
struct Installed {
    pkg: String,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let out = apt_get(&["purge", "-y", &self.pkg]);
        println!("apt-get purge {}: {}", self.pkg, out.status);
        if !out.status.success() {
            eprintln!("apt-get purge {} failed: {}", self.pkg, String::from_utf8_lossy(&out.stderr));
        }
    }
}

fn dir_listing(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// The fake NVML (a test fixture, never in the package), built by cargo.
fn fake_nvml(installed_dir: &str) -> GpuPluginFiles {
    let project = default_project_dir();
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| project.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_ok(Command::new(cargo).current_dir(&project).args(["build", "-p", "fake-nvml", "--target-dir"]).arg(&target));
    let debug = target.join("debug");
    GpuPluginFiles {
        gpu_nvml: Path::new(installed_dir).join("gpu_nvml.so"),
        acct_gather_energy_nvml: Path::new(installed_dir).join("acct_gather_energy_nvml.so"),
        fake_nvml_lib: debug.join("libfake_nvml.so"),
        fake_nvml_ctl: debug.join("fake-nvml-ctl"),
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn package_22_05_installs_with_apt_and_runs_hinted_jobs() {
    const TEST: &str = "package_22_05_installs_with_apt_and_runs_hinted_jobs";
    if skip_live_test(TEST) {
        return;
    }
    let _serial = serial();
    let release = SlurmRelease::find("22.05", PackageFormat::Deb).expect("22.05");
    let running = slurm_release().expect("slurmctld -V");
    if running != release.upstream || std::env::var_os("SLURM_ENERGY_SLURM_PREFIX").is_some_and(|p| !p.is_empty()) {
        return skip_for(TEST, &format!("the harness runs Slurm {running} (SLURM_ENERGY_SLURM_PREFIX), not Debian 12's packages of {}", release.upstream));
    }
    let pkg = release.package_name();
    assert!(!is_installed(&pkg), "{pkg} is installed already (left by an earlier run?): `apt-get purge {pkg}` first; this test leaves the machine as it found it");
    let dir = plugin_dir(&multiarch());
    let before = dir_listing(&dir);
    for (_, _, name) in PLUGINS {
        assert!(!before.contains(name), "{dir}/{name} exists before the install: the test could not tell the package's plugins from it");
    }

    let deb = build_package(release).unwrap_or_else(|e| panic!("{e}"));
    check_package(&deb, release);

    // apt would install the package alone: purging it restores the machine.
    let deb_arg = deb.display().to_string();
    let sim = apt_get(&["install", "-s", &deb_arg]);
    let sim_out = String::from_utf8_lossy(&sim.stdout).into_owned();
    assert!(sim.status.success(), "apt-get install -s: {sim_out}{}", String::from_utf8_lossy(&sim.stderr));
    let inst: Vec<&str> = sim_out.lines().filter(|l| l.starts_with("Inst ")).collect();
    assert!(inst.len() == 1 && inst[0].starts_with(&format!("Inst {pkg} ")), "apt would install more than {pkg}: {inst:?}");
    let out = apt_get(&["install", "-y", &deb_arg]);
    assert!(out.status.success(), "apt-get install {deb_arg}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let installed = Installed { pkg: pkg.clone() };
    assert!(is_installed(&pkg));
    for (_, _, name) in PLUGINS {
        assert!(Path::new(&dir).join(name).is_file(), "{dir}/{name} not installed");
    }
    let version = run_ok(Command::new("/usr/bin/slurm-energy").arg("--version"));
    assert!(version.starts_with("slurm-energy "), "{version}");

    // A cluster on the installed plugins: PluginDir is Debian's directory alone.
    let doc = PathBuf::from(format!("/usr/share/doc/{pkg}/examples"));
    let plugstack = std::fs::read_to_string(doc.join("plugstack.conf")).expect("installed plugstack.conf example");
    let energy_example = std::fs::read_to_string(doc.join("energy.toml")).expect("installed energy.toml example");
    let site = FakeGpuSite::create(&fake_nvml(&dir)).unwrap_or_else(|e| panic!("{e}"));
    let type_name = site.type_name.clone();
    let energy_toml = demo_energy_toml(&energy_example, Some(&model::data::default_data_dir()), Some(&type_name));
    let mut extra_slurm_conf = FakeGpuSite::slurm_conf_lines();
    extra_slurm_conf.push("CliFilterPlugins=cli_filter/energy".into());
    let cfg = ClusterConfig {
        nodes: DEMO_NODES,
        gpus_per_node: DEMO_GPUS_PER_NODE,
        plugin_dir: None,
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), energy_toml), ("plugstack.conf".into(), plugstack)],
        extra_slurm_conf,
        daemon_env: site.daemon_env(),
        gpu_autodetect: Some("nvml".into()),
        gpu_type: Some(type_name.clone()),
        with_accounting: true,
        ..ClusterConfig::default()
    };
    let cluster = LocalCluster::start(cfg).unwrap_or_else(|e| panic!("cluster: {e}"));
    let conf = std::fs::read_to_string(cluster.conf_path()).expect("slurm.conf");
    let plugin_dirs: Vec<&str> = conf.lines().filter(|l| l.starts_with("PluginDir=")).collect();
    assert_eq!(plugin_dirs, vec![format!("PluginDir={dir}").as_str()], "the cluster does not load from the installed plugin dir alone");

    let slurmd_log = cluster.slurmd_log("n1");
    assert!(slurmd_log.contains("gpu/nvml: loaded (slurm-energy"), "the installed gpu_nvml.so was not loaded:\n{slurmd_log}");
    assert!(slurmd_log.contains("gpu/nvml: slurmd: 4 GPU(s) detected through NVML"), "{slurmd_log}");

    // The man page documents exactly the options the installed plugin registers.
    let help = cluster.command("sbatch").arg("--help").output().expect("sbatch --help");
    let registered = package_man::options_in_help(&String::from_utf8_lossy(&help.stdout));
    let man = run_ok(Command::new("gzip").args(["-dc", "/usr/share/man/man7/slurm-energy-hints.7.gz"]));
    let documented = package_man::options_in_page(&man);
    println!("sbatch --help lists {registered:?}");
    assert_eq!(documented, registered, "slurm-energy-hints(7) and the installed spank_energy.so disagree");
    let bad = cluster.command("sbatch").args(["--energy-policy=turbo", "--wrap", "true"]).output().expect("sbatch");
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("allowed is performance, balanced or efficiency"));

    // Hinted jobs: started by sched/energy with a decision record, GPU energy in sacct.
    let jobs: [(&str, u32, &[&str]); 3] = [
        ("perf", 2, &["--energy-policy=performance"]),
        ("eff", 1, &["--energy-policy=efficiency", "--energy-max-slowdown=1.5"]),
        ("plain", 1, &[]),
    ];
    let sleep_s = 4;
    let mut ids = Vec::new();
    for (name, gpus, hints) in jobs {
        let gres = format!("--gres=gpu:{gpus}");
        let mut args = vec!["-J", name, gres.as_str(), "-t", "5"];
        args.extend_from_slice(hints);
        ids.push(cluster.sbatch(&args, &site.job_script(sleep_s)).unwrap_or_else(|e| panic!("sbatch {name}: {e}")));
    }
    for ((name, gpus, hints), id) in jobs.iter().zip(&ids) {
        assert_eq!(cluster.wait_job_done(*id, Duration::from_secs(180)).expect("wait"), "COMPLETED", "job {id} ({name}):\n{}", cluster.slurmctld_log());
        cluster.wait_accounted(*id, Duration::from_secs(60)).expect("accounted");
        let line = cluster.sacct(*id, "ConsumedEnergyRaw,AdminComment").expect("sacct");
        let (energy, decision) = line.lines().next().unwrap_or_default().split_once('|').unwrap_or_default();
        println!("job {id} {name}: ConsumedEnergy {} J, AdminComment {}", energy.trim(), decision.trim());
        let want = hints.iter().find_map(|h| h.strip_prefix("--energy-policy=")).unwrap_or("balanced");
        assert!(decision.trim().starts_with(&format!("energy:policy={want} ")), "job {id} has no sched/energy decision for {want}: {line}");
        let energy_j: f64 = energy.trim().parse().unwrap_or(0.0);
        assert!(energy_j >= 41.0 * f64::from(*gpus) * f64::from(sleep_s) * 0.9, "job {id}: GPU energy {energy_j} J in sacct: {line}");
    }
    cluster.stop().expect("stop");
    drop(site);

    drop(installed);
    assert!(!is_installed(&pkg), "{pkg} still installed after apt-get purge");
    assert_eq!(dir_listing(&dir), before, "{dir} differs from before the install");
    assert!(!Path::new("/usr/bin/slurm-energy").exists(), "/usr/bin/slurm-energy left behind");
}

#[cfg_attr(live_skip, ignore = "needs root (tools/slurm-release.sh prepares Slurm 24.11.5's tree)")]
#[test]
fn package_24_11_has_its_files_depends_and_no_lintian_errors() {
    const TEST: &str = "package_24_11_has_its_files_depends_and_no_lintian_errors";
    if skip_live_test(TEST) {
        return;
    }
    let _serial = serial();
    let release = SlurmRelease::find("24.11", PackageFormat::Deb).expect("24.11");
    let deb = build_package(release).unwrap_or_else(|e| panic!("{e}"));
    assert!(deb.file_name().is_some_and(|n| n.to_string_lossy().starts_with("slurm-energy-plugins-24.11_")), "{}", deb.display());
    check_package(&deb, release);
}

#[cfg_attr(live_skip, ignore = "needs root (tools/slurm-release.sh)")]
#[test]
fn package_26_05_fails_with_the_reason_or_passes_the_checks() {
    const TEST: &str = "package_26_05_fails_with_the_reason_or_passes_the_checks";
    if skip_live_test(TEST) {
        return;
    }
    let _serial = serial();
    let release = SlurmRelease::find("26.05", PackageFormat::Deb).expect("26.05");
    match build_package(release) {
        Err(e) => {
            println!("slurm-energy package --slurm 26.05: {e}");
            assert!(e.contains("cannot package for Slurm 26.05.5"), "{e}");
            assert!(e.contains("slurm-wlm 26.05.5-1"), "the reason does not name Debian's package: {e}");
            assert!(e.contains("archive"), "the reason does not say what failed: {e}");
        }
        // The day the archive serves it, the package must be as good as the others.
        Ok(deb) => check_package(&deb, release),
    }
}

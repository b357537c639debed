//! `slurm-energy package --format deb|rpm --slurm <release>`: one package per Slurm release,
//! `slurm-energy-plugins-<series>`, either a `.deb` for Debian's own Slurm packages of that
//! release (bookworm's 22.05.8, trixie's 24.11.5, forky's 26.05.5) or an RPM for SchedMD's Slurm
//! RPMs (22.05.8, 24.11.5, 25.11.7, 26.05.3). Which micro release each format builds for is
//! [`RELEASES`]; [`SlurmRelease::find`] picks it and says why when a format has none.
//!
//! Steps: find the release's configured Slurm tree (`tools/slurm-env.sh` for the system's
//! 22.05.8, `tools/slurm-release.sh` for the others, or `--slurm-src`), check that it is exactly
//! that release, build the plugins in release mode against it (a target dir of their own per
//! release), the `slurm-energy` CLI and the man pages, then lay out the package
//! ([`deb`], [`rpm`]) and build it with `dpkg-deb` or `rpmbuild`.
//!
//! Which Debian packages the result depends on, and why a range pinned to the micro release:
//! see [`SlurmRelease::depends`].

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub mod cli;
pub mod deb;
pub mod lintian;
pub mod man;
pub mod rpm;

use deb::DebInputs;

/// Debian's `slurm-wlm` of one Slurm micro release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebianSlurm {
    /// Version of Debian's `slurm-wlm` source package.
    pub version: &'static str,
    /// The Debian suite that ships it.
    pub suite: &'static str,
}

/// A Slurm micro release the bundle is packaged for, and which packages of it: Debian's (a
/// `.deb`), SchedMD's RPMs (an RPM), or both. One series may have a different micro release per
/// format (26.05: Debian ships 26.05.5, the bundle builds SchedMD's 26.05.3 for the RPMs), and
/// Slurm loads a plugin only when it was built for its exact micro release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlurmRelease {
    /// `major.minor`, as given to `--slurm` and in the package name.
    pub series: &'static str,
    /// The micro release the plugins are built for (Slurm checks it at load time).
    pub upstream: &'static str,
    /// The next micro release (excluded by the `.deb`'s `Depends`).
    pub next_micro: &'static str,
    /// Debian's package of exactly this micro release, when a Debian suite ships one: what
    /// `--format deb` builds for.
    pub debian: Option<DebianSlurm>,
    /// `--format rpm` builds for SchedMD's `slurm` RPMs of this micro release.
    pub schedmd_rpm: bool,
}

/// The releases the bundle is packaged for (README, "Slurm releases"). Per format each series
/// has at most one micro release.
pub const RELEASES: [SlurmRelease; 5] = [
    SlurmRelease { series: "22.05", upstream: "22.05.8", next_micro: "22.05.9", debian: Some(DebianSlurm { version: "22.05.8-4+deb12u3", suite: "bookworm" }), schedmd_rpm: true },
    SlurmRelease { series: "24.11", upstream: "24.11.5", next_micro: "24.11.6", debian: Some(DebianSlurm { version: "24.11.5-4+deb13u1", suite: "trixie" }), schedmd_rpm: true },
    // No Debian suite ships 25.11.
    SlurmRelease { series: "25.11", upstream: "25.11.7", next_micro: "25.11.8", debian: None, schedmd_rpm: true },
    // SchedMD's release tarball (tools/slurm-release.sh, checked against SHA256SUMS).
    SlurmRelease { series: "26.05", upstream: "26.05.3", next_micro: "26.05.4", debian: None, schedmd_rpm: true },
    // Listed by the archive in forky, whose files it does not serve here: `--format deb --slurm
    // 26.05` says so when tools/slurm-release.sh cannot fetch it.
    SlurmRelease { series: "26.05", upstream: "26.05.5", next_micro: "26.05.6", debian: Some(DebianSlurm { version: "26.05.5-1", suite: "forky" }), schedmd_rpm: false },
];

/// Debian's binary package that ships Slurm's plugin directory and `libslurmfull.so`; slurmctld,
/// slurmd and slurm-client each depend on exactly its version, so every host of a cluster
/// (controller, compute node, submit host) has it, and our plugins go into its directory.
pub const SLURM_PLUGINS_PACKAGE: &str = "slurm-wlm-basic-plugins";

/// Debian's package with Slurm's own `gpu_nvml.so` (source `slurm-wlm-contrib`, in contrib for bookworm, trixie and forky); ours replaces it.
pub const STOCK_NVML_PACKAGE: &str = "slurm-wlm-nvml-plugin";

/// Virtual package every `slurm-energy-plugins-<series>` provides and conflicts with: they all
/// install the same plugin names and `/usr/bin/slurm-energy`, so only one can be installed.
pub const VIRTUAL_PACKAGE: &str = "slurm-energy-plugins";

/// The plugins in the package: (cargo package, file cargo builds, name in the plugin dir).
pub const PLUGINS: [(&str, &str, &str); 5] = [
    ("slurm-sched-plugin", "libsched_energy.so", "sched_energy.so"),
    ("spank-energy", "libspank_energy.so", "spank_energy.so"),
    ("gpu-nvml-plugin", "libgpu_nvml.so", "gpu_nvml.so"),
    ("acct-gather-energy-nvml", "libacct_gather_energy_nvml.so", "acct_gather_energy_nvml.so"),
    ("cli-filter-energy", "libcli_filter_energy.so", "cli_filter_energy.so"),
];

impl SlurmRelease {
    /// The release `format` builds for `--slurm text` (`26.05`, or the full `26.05.3`); when
    /// that format has none, why, and what there is instead.
    pub fn find(text: &str, format: PackageFormat) -> Result<SlurmRelease, String> {
        let named: Vec<SlurmRelease> = RELEASES.iter().copied().filter(|r| r.series == text || r.upstream == text).collect();
        if let Some(r) = named.iter().find(|r| r.offered(format)) {
            return Ok(*r);
        }
        let series = text.split('.').take(2).collect::<Vec<_>>().join(".");
        let same_series: Vec<SlurmRelease> = RELEASES.iter().copied().filter(|r| r.series == series).collect();
        let offered = same_series.iter().find(|r| r.offered(format));
        let other_format = match format {
            PackageFormat::Deb => PackageFormat::Rpm,
            PackageFormat::Rpm => PackageFormat::Deb,
        };
        let elsewhere = same_series.iter().find(|r| (r.upstream == text || r.series == text) && r.offered(other_format));
        let exact = "Slurm loads a plugin only when it was built for its exact micro release";
        Err(match (format, offered, elsewhere) {
            (PackageFormat::Deb, None, Some(r)) => format!(
                "no Debian package of Slurm {series}: no Debian suite ships slurm-wlm {series}, so a .deb would have no {SLURM_PLUGINS_PACKAGE} of it to depend on; SchedMD's RPMs of {} are: --format rpm --slurm {series}",
                r.upstream
            ),
            (PackageFormat::Rpm, None, Some(r)) => format!(
                "no RPM for Slurm {series}: the bundle is not packaged for SchedMD's RPMs of {series}; Debian's slurm-wlm {} is: --format deb --slurm {series}",
                r.upstream
            ),
            (_, Some(r), _) => {
                let whose = match (format, r.debian) {
                    (PackageFormat::Deb, Some(d)) => format!("Debian's slurm-wlm {} ({})", d.version, d.suite),
                    _ => format!("SchedMD's Slurm {} RPMs", r.upstream),
                };
                let also = match elsewhere {
                    Some(e) => format!("; {} is packaged with --format {}", e.upstream, other_format.name()),
                    None => String::new(),
                };
                format!("no {} package for Slurm {text}: --format {} --slurm {series} builds for {whose}, and {exact}{also}", format.name(), format.name())
            }
            (_, None, None) => format!("no package for Slurm {text:?}: the bundle is packaged for {}", offer_summary()),
        })
    }

    /// Whether `format` builds for this release.
    pub fn offered(&self, format: PackageFormat) -> bool {
        match format {
            PackageFormat::Deb => self.debian.is_some(),
            PackageFormat::Rpm => self.schedmd_rpm,
        }
    }

    /// Debian's package of this release, or why a `.deb` cannot be made for it.
    pub fn debian_slurm(&self) -> Result<DebianSlurm, String> {
        self.debian.ok_or_else(|| format!("no Debian suite ships slurm-wlm {}: there is no .deb for it (--format rpm)", self.upstream))
    }

    /// `slurm-energy-plugins-22.05`.
    pub fn package_name(&self) -> String {
        format!("{VIRTUAL_PACKAGE}-{}", self.series)
    }

    /// The `Depends` on Slurm: `slurm-wlm-basic-plugins (>= 22.05.8), slurm-wlm-basic-plugins
    /// (<< 22.05.9~)`. Slurm refuses a plugin built for another micro release (it compares
    /// `plugin_version` with its own `SLURM_VERSION_NUMBER`), so the range is exactly the micro
    /// release; within it, Debian's stable updates (`-4+deb12u3` -> `u4`) keep the version
    /// Slurm checks and the internal interfaces, and an exact `(= 22.05.8-4+deb12u3)` would
    /// only make apt hold back or remove the bundle at each security update.
    pub fn depends(&self) -> String {
        format!("{SLURM_PLUGINS_PACKAGE} (>= {}), {SLURM_PLUGINS_PACKAGE} (<< {}~)", self.upstream, self.next_micro)
    }
}

/// Which kind of package `slurm-energy package` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PackageFormat {
    /// A `.deb` for Debian's Slurm packages ([`deb`]).
    #[default]
    Deb,
    /// An RPM for SchedMD's Slurm RPMs on RHEL-family systems ([`rpm`]).
    Rpm,
}

impl PackageFormat {
    /// `deb`, `rpm`: as given to `--format`.
    pub fn name(self) -> &'static str {
        match self {
            PackageFormat::Deb => "deb",
            PackageFormat::Rpm => "rpm",
        }
    }

    pub fn parse(name: &str) -> Result<PackageFormat, String> {
        match name {
            "deb" => Ok(PackageFormat::Deb),
            "rpm" => Ok(PackageFormat::Rpm),
            other => Err(format!("--format {other:?}: expected deb or rpm")),
        }
    }
}

/// `22.05 (22.05.8, bookworm), 24.11 (24.11.5, trixie), …`: what `format` builds for.
pub fn offers(format: PackageFormat) -> String {
    RELEASES
        .iter()
        .filter(|r| r.offered(format))
        .map(|r| match (format, r.debian) {
            (PackageFormat::Deb, Some(d)) => format!("{} ({}, {})", r.series, r.upstream, d.suite),
            _ => format!("{} ({})", r.series, r.upstream),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Both formats' [`offers`], for messages and `--help`.
pub fn offer_summary() -> String {
    format!("deb (Debian's slurm-wlm): {}; rpm (SchedMD's slurm RPMs): {}", offers(PackageFormat::Deb), offers(PackageFormat::Rpm))
}

/// What `slurm-energy package` was asked for.
#[derive(Clone, Debug)]
pub struct PackageOptions {
    pub project_dir: PathBuf,
    pub release: SlurmRelease,
    pub format: PackageFormat,
    /// Where the `.deb` goes (default `<project>/target/packages`).
    pub out_dir: PathBuf,
    /// The configured Slurm tree; default: the one `tools/slurm-env.sh` (22.05) or
    /// `tools/slurm-release.sh` (others) prepares.
    pub slurm_src: Option<PathBuf>,
    /// Cargo's target dir for the plugins; default `<project>/target` for 22.05 (the system's
    /// release, as `.ci/run`) and `<project>/target/slurm-<series>` for the others.
    pub target_dir: Option<PathBuf>,
    /// `Maintainer:` of the package (default: packaging/debian/maintainer).
    pub maintainer: Option<String>,
}

impl PackageOptions {
    pub fn new(project_dir: &Path, release: SlurmRelease) -> PackageOptions {
        PackageOptions {
            out_dir: project_dir.join("target").join("packages"),
            project_dir: project_dir.to_path_buf(),
            release,
            format: PackageFormat::Deb,
            slurm_src: None,
            target_dir: None,
            maintainer: None,
        }
    }

    fn plugin_target_dir(&self) -> PathBuf {
        match &self.target_dir {
            Some(d) => d.clone(),
            None if self.release.series == "22.05" => self.project_dir.join("target"),
            None => self.project_dir.join("target").join(format!("slurm-{}", self.release.series)),
        }
    }
}

/// `#define SLURM_VERSION_NUMBER 0x160508` of a configured tree -> `22.05.8`.
pub fn tree_release(src: &Path) -> Result<String, String> {
    let header = src.join("slurm").join("slurm_version.h");
    let text = std::fs::read_to_string(&header).map_err(|e| format!("{}: {e} (not a configured Slurm source tree)", header.display()))?;
    let (line_no, hex) = text
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.strip_prefix("#define SLURM_VERSION_NUMBER ").map(|v| (i + 1, v.trim())))
        .ok_or_else(|| format!("{}: no SLURM_VERSION_NUMBER line", header.display()))?;
    let n = u32::from_str_radix(hex.trim_start_matches("0x"), 16)
        .map_err(|e| format!("{}:{line_no}: SLURM_VERSION_NUMBER {hex:?} is not a hex number: {e}", header.display()))?;
    Ok(format!("{}.{:02}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff))
}

/// Runs a script of the project that prints `SLURM_SRC_DIR=...` on stdout; its progress on
/// stderr is passed through, and its last lines are repeated in the error when it fails.
fn run_tree_script(project: &Path, script: &str, args: &[&str]) -> Result<PathBuf, String> {
    let path = project.join("tools").join(script);
    if !path.is_file() {
        return Err(format!("{} not found: is {} the project's source tree?", path.display(), project.display()));
    }
    eprintln!("slurm-energy package: bash tools/{script} {}", args.join(" "));
    let mut child = Command::new("bash")
        .arg(&path)
        .args(args)
        .current_dir(project)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {}: {e}", path.display()))?;
    let stderr = child.stderr.take();
    let tail = std::thread::spawn(move || {
        let mut last: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        if let Some(err) = stderr {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if last.len() == 6 {
                    last.pop_front();
                }
                last.push_back(line);
            }
        }
        last.into_iter().collect::<Vec<_>>()
    });
    let mut stdout = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    let status = child.wait().map_err(|e| format!("wait for {}: {e}", path.display()))?;
    let last = tail.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("tools/{script} {} failed ({status}):\n{}", args.join(" "), last.join("\n")));
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("SLURM_SRC_DIR="))
        .map(|d| PathBuf::from(d.trim()))
        .ok_or_else(|| format!("tools/{script} printed no SLURM_SRC_DIR= line"))
}

/// The configured Slurm tree of `release`, prepared by the project's scripts when not given.
pub fn slurm_tree(opts: &PackageOptions) -> Result<PathBuf, String> {
    let rel = &opts.release;
    let src = match &opts.slurm_src {
        Some(s) => s.clone(),
        None if rel.series == "22.05" => run_tree_script(&opts.project_dir, "slurm-env.sh", &[])
            .map_err(|e| format!("cannot prepare Slurm {}'s source tree: {e}", rel.upstream))?,
        None => run_tree_script(&opts.project_dir, "slurm-release.sh", &[rel.upstream]).map_err(|e| {
            let source = match rel.debian {
                Some(d) => format!("Debian's slurm-wlm {} from {}, or else SchedMD's slurm-{}.tar.xz", d.version, d.suite, rel.upstream),
                None => format!("SchedMD's release tarball slurm-{}.tar.xz", rel.upstream),
            };
            format!(
                "cannot package for Slurm {up}: the plugins must be built against Slurm {up}'s own configured source tree ({source}), which tools/slurm-release.sh could not prepare on this machine (or give one with --slurm-src); a tree of another micro release will not do.\n{e}",
                up = rel.upstream
            )
        })?,
    };
    let found = tree_release(&src)?;
    if found != rel.upstream {
        return Err(format!(
            "{} is Slurm {found}, not {}: a package for {} must be built against that exact release",
            src.display(),
            rel.upstream,
            rel.series
        ));
    }
    Ok(src)
}

fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let status = cmd.stdin(Stdio::null()).status().map_err(|e| format!("{what}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{what} failed ({status})")) }
}

/// The files the package is made of, built.
#[derive(Clone, Debug)]
pub struct BuiltFiles {
    /// (built file, name in the plugin dir).
    pub plugins: Vec<(PathBuf, String)>,
    pub cli: PathBuf,
    /// `name<TAB>arginfo<TAB>usage` of each `--energy-*` option, as spank_energy.so registers it.
    pub spank_options: String,
    /// `slurm-energy --help` and each subcommand's.
    pub cli_help: Vec<(String, String)>,
}

/// Debian's build flags for C (`dpkg-buildflags`: CFLAGS and CPPFLAGS, hence
/// `-D_FORTIFY_SOURCE=2`, `-fstack-protector-strong`, `-Werror=format-security`) for the C shim
/// the plugins link (the cc crate reads `CFLAGS`); Rust code needs none of them.
pub fn debian_cflags() -> Result<String, String> {
    let get = |what: &str| -> Result<String, String> {
        let out = Command::new("dpkg-buildflags").args(["--get", what]).output().map_err(|e| format!("run dpkg-buildflags: {e} (apt-get install dpkg-dev)"))?;
        if !out.status.success() {
            return Err(format!("dpkg-buildflags --get {what} failed ({})", out.status));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    Ok(format!("{} {}", get("CFLAGS")?, get("CPPFLAGS")?))
}

/// Builds the plugins (release) against `src`, the spank-energy example that lists the options,
/// and the CLI (release-independent, in the project's default target dir).
pub fn build(opts: &PackageOptions, src: &Path) -> Result<BuiltFiles, String> {
    let target = opts.plugin_target_dir();
    let mut plugins_cmd = Command::new(cargo());
    plugins_cmd
        .current_dir(&opts.project_dir)
        .args(["build", "--release"])
        .args(PLUGINS.iter().flat_map(|(p, _, _)| ["-p", p]))
        .arg("--target-dir")
        .arg(&target)
        .env("SLURM_SRC_DIR", src)
        .env("CFLAGS", debian_cflags()?);
    eprintln!("slurm-energy package: building the plugins for Slurm {} in {}", opts.release.upstream, target.display());
    run(&mut plugins_cmd, "cargo build --release (plugins)")?;
    let mut example = Command::new(cargo());
    example
        .current_dir(&opts.project_dir)
        .args(["build", "--release", "-p", "spank-energy", "--example", "man_options", "--target-dir"])
        .arg(&target)
        .env("SLURM_SRC_DIR", src);
    run(&mut example, "cargo build --release -p spank-energy --example man_options")?;
    let release_dir = target.join("release");
    let lister = release_dir.join("examples").join("man_options");
    let out = Command::new(&lister).output().map_err(|e| format!("run {}: {e}", lister.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({}): {}", lister.display(), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let spank_options = String::from_utf8(out.stdout).map_err(|e| format!("{}: output is not UTF-8: {e}", lister.display()))?;

    let cli_target = opts.project_dir.join("target");
    let mut cli_cmd = Command::new(cargo());
    cli_cmd.current_dir(&opts.project_dir).args(["build", "--release", "-p", "tools", "--bin", "slurm-energy", "--target-dir"]).arg(&cli_target);
    run(&mut cli_cmd, "cargo build --release -p tools --bin slurm-energy")?;
    let cli = cli_target.join("release").join("slurm-energy");

    let mut plugins = Vec::new();
    for (_, built, name) in PLUGINS {
        let p = release_dir.join(built);
        if !p.is_file() {
            return Err(format!("{} was not built", p.display()));
        }
        plugins.push((p, name.to_string()));
    }
    let cli_help = cli_help_texts(&cli)?;
    Ok(BuiltFiles { plugins, cli, spank_options, cli_help })
}

/// `slurm-energy --help`, then `slurm-energy <sub> --help` for each subcommand it lists.
fn cli_help_texts(cli: &Path) -> Result<Vec<(String, String)>, String> {
    let help = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(cli).args(args).arg("--help").env("COLUMNS", "78").output().map_err(|e| format!("run {}: {e}", cli.display()))?;
        if !out.status.success() {
            return Err(format!("{} {} --help failed ({})", cli.display(), args.join(" "), out.status));
        }
        String::from_utf8(out.stdout).map_err(|e| format!("{} --help: not UTF-8: {e}", cli.display()))
    };
    let top = help(&[])?;
    let mut texts = vec![(String::new(), top.clone())];
    let mut in_commands = false;
    for line in top.lines() {
        if line.trim_end() == "Commands:" {
            in_commands = true;
            continue;
        }
        if in_commands {
            let Some(name) = line.strip_prefix("  ").and_then(|l| l.split_whitespace().next()) else { break };
            if name != "help" {
                texts.push((name.to_string(), help(&[name])?));
            }
        }
    }
    Ok(texts)
}

/// Builds the package; returns the `.deb`'s (or `.rpm`'s) path.
pub fn package(opts: &PackageOptions) -> Result<PathBuf, String> {
    if !opts.release.offered(opts.format) {
        return Err(format!("no {} package for Slurm {}: --format {} builds for {}", opts.format.name(), opts.release.upstream, opts.format.name(), offers(opts.format)));
    }
    let tools: &[&str] = match opts.format {
        PackageFormat::Deb => &["dpkg-deb", "dpkg-shlibdeps", "dpkg-buildflags", "strip", "md5sum", "gzip"],
        PackageFormat::Rpm => &["rpmbuild", "dpkg-buildflags", "strip", "gzip", "objdump"],
    };
    for tool in tools {
        if which(tool).is_none() {
            return Err(format!("{tool} is not installed (apt-get install dpkg-dev binutils rpm)"));
        }
    }
    let src = slurm_tree(opts)?;
    let source_note = source_note(&src, &opts.release);
    let built = build(opts, &src)?;
    let packaging = opts.project_dir.join("packaging");
    if opts.format == PackageFormat::Rpm {
        let (version, rpm_release) = rpm::split_version(&deb::package_version(&packaging)?);
        let inputs = rpm::RpmInputs {
            release: opts.release,
            version,
            rpm_release,
            arch: rpm::host_arch()?,
            packager: match &opts.maintainer {
                Some(m) => m.clone(),
                None => deb::read_packaging_file(&packaging, "debian/maintainer")?.trim().to_string(),
            },
            packaging,
            energy_toml: opts.project_dir.join("etc").join("energy.toml"),
            source_note: rpm_source_note(&src, &opts.release),
            built,
        };
        return rpm::assemble(&inputs, &opts.out_dir);
    }
    let inputs = DebInputs {
        release: opts.release,
        version: deb::package_version(&packaging)?,
        arch: deb::host_arch()?,
        multiarch: deb::host_multiarch()?,
        maintainer: match &opts.maintainer {
            Some(m) => m.clone(),
            None => deb::read_packaging_file(&packaging, "debian/maintainer")?.trim().to_string(),
        },
        packaging,
        energy_toml: opts.project_dir.join("etc").join("energy.toml"),
        source_note,
        built,
    };
    deb::assemble(&inputs, &opts.out_dir)
}

/// What the plugins were built against, for the changelog and README.Debian: Debian's source
/// package with its patches (a `debian/patches/series` in the tree), or the upstream source
/// alone (where the archive serves the `.orig.tar` but not the Debian diff, as for 24.11.5 here).
pub fn source_note(src: &Path, release: &SlurmRelease) -> String {
    let debian_patched = src.join("debian").join("patches").join("series").is_file();
    match release.debian {
        Some(d) if debian_patched => format!("Built against Debian's slurm-wlm {} source with its patches.", d.version),
        Some(d) => format!(
            "Built against the upstream Slurm {} source without Debian's patches (the archive served no Debian diff of slurm-wlm {}).",
            release.upstream, d.version
        ),
        None => format!("Built against the upstream Slurm {} source (Debian ships no slurm-wlm of it).", release.upstream),
    }
}

/// What the RPM's plugins were built against: the release's configured tree, which for the
/// release of SchedMD's RPMs is upstream's code of that release (with Debian's patches where
/// the tree has them, which the RPM says).
pub fn rpm_source_note(src: &Path, release: &SlurmRelease) -> String {
    if src.join("debian").join("patches").join("series").is_file() {
        let debian = release.debian.map(|d| format!(" {}", d.version)).unwrap_or_default();
        format!("Built on Debian against Slurm {}'s source as Debian's slurm-wlm{debian} patches it; the plugin interface is upstream's.", release.upstream)
    } else {
        format!("Built against the upstream Slurm {} source.", release.upstream)
    }
}

/// The program `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_found_by_series_and_full_version() {
        assert_eq!(SlurmRelease::find("24.11", PackageFormat::Deb).map(|r| r.upstream), Ok("24.11.5"));
        assert_eq!(SlurmRelease::find("22.05.8", PackageFormat::Deb).map(|r| r.series), Ok("22.05"));
        assert_eq!(SlurmRelease::find("22.05.8", PackageFormat::Rpm).map(|r| r.series), Ok("22.05"));
        let err = SlurmRelease::find("23.02", PackageFormat::Deb).unwrap_err();
        assert!(err.contains("deb (Debian's slurm-wlm): 22.05 (22.05.8, bookworm), 24.11 (24.11.5, trixie), 26.05 (26.05.5, forky)"), "{err}");
        assert!(err.contains("rpm (SchedMD's slurm RPMs): 22.05 (22.05.8), 24.11 (24.11.5), 25.11 (25.11.7), 26.05 (26.05.3)"), "{err}");
    }

    #[test]
    fn schedmd_rpms_of_25_11_and_26_05_are_offered_for_their_micro_releases() {
        assert_eq!(SlurmRelease::find("25.11", PackageFormat::Rpm).map(|r| r.upstream), Ok("25.11.7"));
        assert_eq!(SlurmRelease::find("25.11.7", PackageFormat::Rpm).map(|r| r.upstream), Ok("25.11.7"));
        assert_eq!(SlurmRelease::find("26.05", PackageFormat::Rpm).map(|r| r.upstream), Ok("26.05.3"));
        assert_eq!(SlurmRelease::find("26.05.3", PackageFormat::Rpm).map(|r| r.upstream), Ok("26.05.3"));
        let err = SlurmRelease::find("26.05.5", PackageFormat::Rpm).unwrap_err();
        assert!(err.contains("--format rpm --slurm 26.05 builds for SchedMD's Slurm 26.05.3 RPMs") && err.contains("26.05.5 is packaged with --format deb"), "{err}");
        let err = SlurmRelease::find("25.11.6", PackageFormat::Rpm).unwrap_err();
        assert!(err.contains("builds for SchedMD's Slurm 25.11.7 RPMs") && err.contains("exact micro release"), "{err}");
    }

    #[test]
    fn debian_packages_are_debians_releases_only() {
        let r = SlurmRelease::find("26.05", PackageFormat::Deb).expect("26.05");
        assert_eq!((r.upstream, r.debian.map(|d| (d.version, d.suite))), ("26.05.5", Some(("26.05.5-1", "forky"))));
        for text in ["25.11", "25.11.7"] {
            let err = SlurmRelease::find(text, PackageFormat::Deb).unwrap_err();
            assert!(err.contains("no Debian package of Slurm 25.11") && err.contains("--format rpm --slurm 25.11"), "{err}");
        }
        let err = SlurmRelease::find("26.05.3", PackageFormat::Deb).unwrap_err();
        assert!(err.contains("builds for Debian's slurm-wlm 26.05.5-1 (forky)") && err.contains("26.05.3 is packaged with --format rpm"), "{err}");
        assert!(SlurmRelease::find("25.11.7", PackageFormat::Rpm).expect("25.11.7").debian_slurm().unwrap_err().contains("--format rpm"));
    }

    #[test]
    fn each_format_has_one_micro_release_per_series() {
        for format in [PackageFormat::Deb, PackageFormat::Rpm] {
            let offered: Vec<&str> = RELEASES.iter().filter(|r| r.offered(format)).map(|r| r.series).collect();
            let mut unique = offered.clone();
            unique.dedup();
            assert_eq!(offered, unique, "{format:?}");
        }
        for r in RELEASES {
            assert!(r.offered(PackageFormat::Deb) || r.offered(PackageFormat::Rpm), "{r:?} is packaged in no format");
        }
    }

    #[test]
    fn a_release_is_not_packaged_in_a_format_it_is_not_offered_in() {
        let mut opts = PackageOptions::new(Path::new("/nonexistent"), SlurmRelease::find("25.11", PackageFormat::Rpm).expect("25.11"));
        opts.format = PackageFormat::Deb;
        let err = package(&opts).unwrap_err();
        assert!(err.starts_with("no deb package for Slurm 25.11.7"), "{err}");
    }

    #[test]
    fn depends_pins_the_micro_release() {
        let r = SlurmRelease::find("22.05", PackageFormat::Deb).expect("22.05");
        assert_eq!(r.depends(), "slurm-wlm-basic-plugins (>= 22.05.8), slurm-wlm-basic-plugins (<< 22.05.9~)");
        assert_eq!(r.package_name(), "slurm-energy-plugins-22.05");
        for r in RELEASES {
            if let Some(d) = r.debian {
                assert!(d.version.starts_with(&format!("{}-", r.upstream)), "{r:?}");
            }
            assert!(r.upstream.starts_with(&format!("{}.", r.series)), "{r:?}");
            assert!(r.next_micro.starts_with(&format!("{}.", r.series)), "{r:?}");
        }
    }

    #[test]
    fn tree_release_reads_the_version_header_and_names_bad_lines() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join("slurm")).expect("mkdir");
        let h = d.path().join("slurm/slurm_version.h");
        std::fs::write(&h, "#define SLURM_VERSION_NUMBER 0x180b05\n").expect("write");
        assert_eq!(tree_release(d.path()), Ok("24.11.5".to_string()));
        std::fs::write(&h, "/* x */\n#define SLURM_VERSION_NUMBER zz\n").expect("write");
        let err = tree_release(d.path()).unwrap_err();
        assert!(err.contains("slurm_version.h:2:"), "{err}");
        assert!(tree_release(&d.path().join("none")).unwrap_err().contains("not a configured Slurm source tree"));
    }
}

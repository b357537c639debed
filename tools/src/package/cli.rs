//! The `slurm-energy package` subcommand's arguments and what it prints.

use std::path::PathBuf;

use clap::Args;

use crate::package::{PackageFormat, PackageOptions, SlurmRelease, offers, package};
use super::{lintian, rpm};

#[derive(Args, Debug)]
pub struct PackageArgs {
    // Help from the release table: what each format builds for.
    #[arg(long, help = slurm_help())]
    pub slurm: String,
    /// deb: for Debian's Slurm packages (plugins in /usr/lib/<triplet>/slurm-wlm); rpm: for
    /// SchedMD's Slurm RPMs on RHEL-family systems (plugins in /usr/lib64/slurm, requires their
    /// `slurm` package of exactly that release; built with rpmbuild from Debian's rpm package).
    #[arg(long, default_value = "deb")]
    pub format: String,
    /// Directory for the package (default: target/packages in the project).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The release's configured Slurm source tree (default: prepared by tools/slurm-env.sh for
    /// 22.05, tools/slurm-release.sh for the others).
    #[arg(long)]
    pub slurm_src: Option<PathBuf>,
    /// Cargo target dir for the plugins (default: target for 22.05, target/slurm-<release>
    /// otherwise).
    #[arg(long)]
    pub target_dir: Option<PathBuf>,
    /// Maintainer field of the package (default: packaging/debian/maintainer).
    #[arg(long)]
    pub maintainer: Option<String>,
    /// Run lintian on the package and print its findings (fails on errors).
    #[arg(long)]
    pub lintian: bool,
    /// Run rpmlint on the RPM (with packaging/rpm/slurm-energy-plugins.rpmlintrc, every filter
    /// there with its reason) and print its findings (fails on errors); also print the newest
    /// GLIBC symbol version each ELF file needs against RHEL 9's 2.34 and RHEL 8's 2.28.
    #[arg(long)]
    pub rpmlint: bool,
    /// The project's source tree (default: found from the program's location or the current
    /// directory, as for `demo`).
    #[arg(long)]
    pub project_dir: Option<PathBuf>,
}

/// `--slurm`'s help: what each format builds for, from [`crate::package::RELEASES`].
pub fn slurm_help() -> String {
    format!(
        "Slurm release (series, or its full micro release); a plugin loads only in the micro release it was built for. --format deb (Debian's slurm-wlm): {}; --format rpm (SchedMD's slurm RPMs): {}",
        offers(PackageFormat::Deb),
        offers(PackageFormat::Rpm)
    )
}

pub fn run(a: PackageArgs) -> Result<(), String> {
    let format = PackageFormat::parse(&a.format)?;
    let release = SlurmRelease::find(&a.slurm, format)?;
    let project = a.project_dir.unwrap_or_else(crate::demo::default_project_dir);
    let mut opts = PackageOptions::new(&project, release);
    opts.format = format;
    if let Some(out) = a.out {
        opts.out_dir = out;
    }
    opts.slurm_src = a.slurm_src;
    opts.target_dir = a.target_dir;
    opts.maintainer = a.maintainer;
    let deb = package(&opts)?;
    println!("{}", deb.display());
    if a.rpmlint {
        let report = rpm::rpmlint(&deb, &project.join("packaging/rpm/slurm-energy-plugins.rpmlintrc"))?;
        print!("{}", report.output);
        for (file, newest) in rpm::glibc_report(&deb)? {
            println!("{file}: needs GLIBC_{}.{} (RHEL 9 has 2.34, RHEL 8 2.28)", newest.0, newest.1);
        }
        if report.errors > 0 {
            return Err(format!("rpmlint reports {} error(s) on {}", report.errors, deb.display()));
        }
    }
    if a.lintian {
        let findings = lintian::run(&deb)?;
        print!("{}", lintian::format(&findings));
        if !findings.errors.is_empty() {
            return Err(format!("lintian reports {} error(s) on {}", findings.errors.len(), deb.display()));
        }
    }
    Ok(())
}

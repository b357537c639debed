//! The package layout without Slurm or root: `package::deb::assemble` on stand-in files (copies
//! of /bin/true for the plugins and the CLI) gives a `.deb` with every file in its place,
//! root-owned, with the modes Debian wants, a control file pinned to the release, and md5sums.
//! Needs dpkg-dev and binutils (Debian); without them it says so, and fails under `CI=true`.

use std::path::Path;
use std::process::Command;

use tools::package::{BuiltFiles, PLUGINS, PackageFormat, SlurmRelease, which};
use tools::package::deb::{DebInputs, assemble, package_version};

fn output(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn assemble_lays_out_a_root_owned_package_pinned_to_its_release() {
    if ["dpkg-deb", "dpkg-shlibdeps", "strip", "md5sum", "gzip"].iter().any(|t| which(t).is_none()) {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "dpkg-dev or binutils missing under CI");
        println!("SKIPPED: dpkg-dev or binutils not installed");
        return;
    }
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("project dir").to_path_buf();
    let work = tempfile::tempdir().expect("tempdir");
    let stand_in = |name: &str| {
        let p = work.path().join(name);
        std::fs::copy("/bin/true", &p).expect("copy /bin/true");
        p
    };
    let release = SlurmRelease::find("24.11", PackageFormat::Deb).expect("24.11");
    let built = BuiltFiles {
        plugins: PLUGINS.iter().map(|(_, built, name)| (stand_in(built), name.to_string())).collect(),
        cli: stand_in("slurm-energy"),
        spank_options: "energy-policy\tPOLICY\tEnergy policy: performance, balanced or efficiency\nenergy-tag\tNAME\tWorkload tag\n".into(),
        cli_help: vec![(String::new(), "Usage: slurm-energy <COMMAND>\n".into())],
    };
    let packaging = project.join("packaging");
    let inputs = DebInputs {
        release,
        version: package_version(&packaging).expect("version"),
        arch: "amd64".into(),
        multiarch: "x86_64-linux-gnu".into(),
        maintainer: "Test <test@example.org>".into(),
        packaging,
        energy_toml: project.join("etc/energy.toml"),
        source_note: tools::package::source_note(work.path(), &release),
        built,
    };
    let out = work.path().join("out");
    let deb = assemble(&inputs, &out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(deb, out.join(format!("slurm-energy-plugins-24.11_{}_amd64.deb", inputs.version)));
    assert!(!out.join(".stage-slurm-energy-plugins-24.11").exists(), "the staging dir is left behind");

    let control = output(Command::new("dpkg-deb").arg("-f").arg(&deb));
    assert!(control.contains("Package: slurm-energy-plugins-24.11\n"), "{control}");
    assert!(control.contains("slurm-wlm-basic-plugins (>= 24.11.5), slurm-wlm-basic-plugins (<< 24.11.6~)"), "{control}");
    assert!(control.contains("Maintainer: Test <test@example.org>\n"), "{control}");
    assert!(control.contains("Description: energy-aware scheduler and GPU plugins for Slurm 24.11\n"), "{control}");

    let listing = output(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for line in listing.lines() {
        assert!(line.split_whitespace().nth(1) == Some("root/root"), "not root-owned: {line}");
    }
    for (_, _, name) in PLUGINS {
        let want = format!("./usr/lib/x86_64-linux-gnu/slurm-wlm/{name}");
        assert!(listing.lines().any(|l| l.starts_with("-rw-r--r-- ") && l.ends_with(&want)), "{want} (0644):\n{listing}");
    }
    assert!(listing.lines().any(|l| l.starts_with("-rwxr-xr-x ") && l.ends_with("./usr/bin/slurm-energy")), "{listing}");

    let x = work.path().join("x");
    output(Command::new("dpkg-deb").arg("-R").arg(&deb).arg(&x));
    output(Command::new("md5sum").args(["-c", "--quiet", "DEBIAN/md5sums"]).current_dir(&x));
    let man = output(Command::new("gzip").arg("-dc").arg(x.join("usr/share/man/man7/slurm-energy-hints.7.gz")));
    assert_eq!(tools::package::man::options_in_page(&man), vec!["energy-policy", "energy-tag"], "{man}");
    assert!(!man.contains('@'), "a field was left unfilled:\n{man}");
    let slurm_conf = std::fs::read_to_string(x.join("usr/share/doc/slurm-energy-plugins-24.11/examples/slurm.conf")).expect("slurm.conf example");
    assert!(slurm_conf.contains("SchedulerType=sched/energy") && slurm_conf.contains("/usr/lib/x86_64-linux-gnu/slurm-wlm"), "{slurm_conf}");
    let readme = std::fs::read_to_string(x.join("usr/share/doc/slurm-energy-plugins-24.11/README.Debian")).expect("README.Debian");
    assert!(!readme.contains('@'), "{readme}");
    assert!(readme.contains("without Debian's patches"), "a tree without debian/patches is not said to be upstream's: {readme}");
}

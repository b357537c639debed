//! Lays out and builds the `.deb` of [`crate::package`]: the file tree (plugins in Debian's
//! Slurm plugin dir, the CLI, docs, examples, man pages, lintian overrides), `DEBIAN/control`
//! and `DEBIAN/md5sums`, then `dpkg-deb --root-owner-group --build`.
//!
//! Text that is not computed lives in `packaging/` (templates with `@NAME@` fields).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::man;
use super::{BuiltFiles, STOCK_NVML_PACKAGE, SlurmRelease, VIRTUAL_PACKAGE};

/// Everything [`assemble`] needs.
#[derive(Clone, Debug)]
pub struct DebInputs {
    pub release: SlurmRelease,
    /// Debian version of our package (`0.1.0-1`), from packaging/debian/changelog.in.
    pub version: String,
    /// `amd64`.
    pub arch: String,
    /// `x86_64-linux-gnu`.
    pub multiarch: String,
    pub maintainer: String,
    /// The project's `packaging/`.
    pub packaging: PathBuf,
    /// The project's `etc/energy.toml` (installed as an example).
    pub energy_toml: PathBuf,
    /// Which Slurm source the plugins were built against ([`crate::package::source_note`]).
    pub source_note: String,
    pub built: BuiltFiles,
}

/// Slurm's plugin directory in Debian's packages (`dpkg -L slurm-wlm-basic-plugins` on
/// bookworm; the same in trixie's and forky's file lists).
pub fn plugin_dir(multiarch: &str) -> String {
    format!("/usr/lib/{multiarch}/slurm-wlm")
}

/// `packaging/<rel>` as text, or an error naming the file.
pub fn read_packaging_file(packaging: &Path, rel: &str) -> Result<String, String> {
    let p = packaging.join(rel);
    fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Replaces every `@NAME@` of `fields`; a field left over in the text is an error naming
/// `what` and its line.
/// What the `.deb` and the RPM both ship under `stage`: the examples in `doc` (the project's
/// energy.toml as it is, plugstack.conf and slurm.conf from their templates filled with `fields`)
/// and the man pages (the `--energy-*` options as spank_energy.so registers them, the CLI's
/// help).
pub(super) fn stage_examples_and_man(stage: &Path, doc: &str, packaging: &Path, fields: &[(&str, &str)], energy_toml: &Path, built: &BuiltFiles, version: &str) -> Result<(), String> {
    let template = |rel: &str| -> Result<String, String> { fill(&read_packaging_file(packaging, rel)?, fields, &format!("packaging/{rel}")) };
    let energy_toml_text = fs::read_to_string(energy_toml).map_err(|e| format!("{}: {e}", energy_toml.display()))?;
    write(&stage.join(doc).join("examples/energy.toml"), energy_toml_text.as_bytes(), 0o644)?;
    write(&stage.join(doc).join("examples/plugstack.conf"), template("examples/plugstack.conf.in")?.as_bytes(), 0o644)?;
    write(&stage.join(doc).join("examples/slurm.conf"), template("examples/slurm.conf.in")?.as_bytes(), 0o644)?;
    let options = man::parse_spank_options(&built.spank_options)?;
    let man_in = "man/slurm-energy-hints.7.in";
    let hints = man::hints_page(&read_packaging_file(packaging, man_in)?, &options)?;
    let hints = fill(&hints, fields, &format!("packaging/{man_in} (options filled in)"))?;
    write_gz(&stage.join("usr/share/man/man7/slurm-energy-hints.7.gz"), &hints)?;
    write_gz(&stage.join("usr/share/man/man1/slurm-energy.1.gz"), &man::cli_page(version, &built.cli_help))?;
    Ok(())
}

pub fn fill(template: &str, fields: &[(&str, &str)], what: &str) -> Result<String, String> {
    let mut text = template.to_string();
    for (name, value) in fields {
        text = text.replace(&format!("@{name}@"), value);
    }
    for (i, line) in text.lines().enumerate() {
        if let Some(start) = line.find('@') {
            let rest = &line[start + 1..];
            if let Some(end) = rest.find('@') {
                let name = &rest[..end];
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    return Err(format!("{what}:{}: unknown field @{name}@", i + 1));
                }
            }
        }
    }
    Ok(text)
}

/// The package's version: the first line of packaging/debian/changelog.in,
/// `@PACKAGE@ (0.1.0-1) @SUITE@; urgency=medium`.
pub fn package_version(packaging: &Path) -> Result<String, String> {
    let text = read_packaging_file(packaging, "debian/changelog.in")?;
    changelog_version(&text).map_err(|e| format!("{}: {e}", packaging.join("debian/changelog.in").display()))
}

/// The version in a changelog's first line.
pub fn changelog_version(text: &str) -> Result<String, String> {
    let first = text.lines().next().ok_or("1: empty changelog")?;
    let open = first.find('(').ok_or("1: no '(version)' in the first line")?;
    let close = first[open..].find(')').ok_or("1: no ')' after the version")? + open;
    let v = first[open + 1..close].trim();
    if v.is_empty() || !v.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return Err(format!("1: version {v:?} does not start with a digit"));
    }
    Ok(v.to_string())
}

fn query(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("run {program}: {e} (apt-get install dpkg-dev)"))?;
    if !out.status.success() {
        return Err(format!("{program} {} failed ({})", args.join(" "), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Debian's architecture of this machine (`amd64`).
pub fn host_arch() -> Result<String, String> {
    query("dpkg", &["--print-architecture"])
}

/// The multiarch triplet (`x86_64-linux-gnu`).
pub fn host_multiarch() -> Result<String, String> {
    query("dpkg-architecture", &["-qDEB_HOST_MULTIARCH"])
}

pub(crate) fn mkdir(p: &Path) -> Result<(), String> {
    fs::create_dir_all(p).map_err(|e| format!("create {}: {e}", p.display()))
}

pub(crate) fn write(p: &Path, text: &[u8], mode: u32) -> Result<(), String> {
    if let Some(parent) = p.parent() {
        mkdir(parent)?;
    }
    fs::write(p, text).map_err(|e| format!("write {}: {e}", p.display()))?;
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| format!("chmod {}: {e}", p.display()))
}

/// Copies `src` to `dst` with `mode` and strips it as dh_strip does (`.so`: unneeded symbols
/// only, so that Slurm still finds the plugin's entry points).
pub(crate) fn install_elf(src: &Path, dst: &Path, mode: u32, shared: bool) -> Result<(), String> {
    if let Some(parent) = dst.parent() {
        mkdir(parent)?;
    }
    fs::copy(src, dst).map_err(|e| format!("copy {} to {}: {e}", src.display(), dst.display()))?;
    fs::set_permissions(dst, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod {}: {e}", dst.display()))?;
    let mut strip = Command::new("strip");
    strip.args(["--remove-section=.comment", "--remove-section=.note"]);
    if shared {
        strip.arg("--strip-unneeded");
    }
    let status = strip.arg(dst).status().map_err(|e| format!("run strip: {e}"))?;
    if !status.success() {
        return Err(format!("strip {} failed ({status})", dst.display()));
    }
    fs::set_permissions(dst, fs::Permissions::from_mode(mode)).map_err(|e| format!("chmod {}: {e}", dst.display()))
}

/// `gzip -9n` of `text` into `dst` (no name or time stamp: the same input gives the same file).
pub(crate) fn write_gz(dst: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = dst.parent() {
        mkdir(parent)?;
    }
    let file = fs::File::create(dst).map_err(|e| format!("create {}: {e}", dst.display()))?;
    let mut child = Command::new("gzip")
        .arg("-9n")
        .stdin(Stdio::piped())
        .stdout(file)
        .spawn()
        .map_err(|e| format!("run gzip: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(text.as_bytes()).map_err(|e| format!("gzip {}: {e}", dst.display()))?;
    }
    let status = child.wait().map_err(|e| format!("gzip {}: {e}", dst.display()))?;
    if !status.success() {
        return Err(format!("gzip {} failed ({status})", dst.display()));
    }
    fs::set_permissions(dst, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod {}: {e}", dst.display()))
}

/// Every regular file under `root` (relative paths, sorted), skipping `DEBIAN/`.
pub(crate) fn files_under(root: &Path) -> Result<Vec<PathBuf>, String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
        let entries = fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
            let path = entry.path();
            let ty = entry.file_type().map_err(|e| format!("{}: {e}", path.display()))?;
            if ty.is_dir() {
                if path != root.join("DEBIAN") {
                    walk(root, &path, out)?;
                }
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort();
    Ok(out)
}

/// `Depends` on the shared libraries the ELF files link, by `dpkg-shlibdeps` (run in a scratch
/// dir with the minimal `debian/control` it wants). Slurm's own symbols are resolved by the
/// loading daemon, not a library, so its "used but found in none" notes are dropped.
fn shlibs_depends(elves: &[PathBuf]) -> Result<String, String> {
    let scratch = tempfile::tempdir().map_err(|e| format!("create a scratch dir: {e}"))?;
    write(&scratch.path().join("debian/control"), b"Source: slurm-energy\n\nPackage: slurm-energy\nArchitecture: any\n", 0o644)?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.current_dir(scratch.path()).arg("-O").arg("--warnings=0");
    for e in elves {
        cmd.arg(format!("-e{}", e.display()));
    }
    let out = cmd.output().map_err(|e| format!("run dpkg-shlibdeps: {e}"))?;
    if !out.status.success() {
        return Err(format!("dpkg-shlibdeps failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().find_map(|l| l.strip_prefix("shlibs:Depends=")).unwrap_or("").trim().to_string())
}

/// The `DEBIAN/control` text.
pub fn control_text(i: &DebInputs, installed_size_kib: u64, shlibs: &str, description: &str) -> String {
    let r = &i.release;
    let depends = if shlibs.is_empty() { r.depends() } else { format!("{shlibs}, {}", r.depends()) };
    format!(
        "Package: {pkg}\nVersion: {ver}\nArchitecture: {arch}\nMaintainer: {maint}\nInstalled-Size: {installed_size_kib}\n\
         Depends: {depends}\nProvides: {VIRTUAL_PACKAGE}\nConflicts: {VIRTUAL_PACKAGE}, {STOCK_NVML_PACKAGE}\n\
         Replaces: {VIRTUAL_PACKAGE}, {STOCK_NVML_PACKAGE}\nSection: admin\nPriority: optional\nDescription: {description}",
        pkg = r.package_name(),
        ver = i.version,
        arch = i.arch,
        maint = i.maintainer,
    )
}

/// Builds the package into `out_dir`; returns the `.deb`'s path.
pub fn assemble(i: &DebInputs, out_dir: &Path) -> Result<PathBuf, String> {
    let r = &i.release;
    let debian = r.debian_slurm()?;
    let pkg = r.package_name();
    mkdir(out_dir)?;
    let stage = out_dir.join(format!(".stage-{pkg}"));
    if stage.exists() {
        fs::remove_dir_all(&stage).map_err(|e| format!("remove the old {}: {e}", stage.display()))?;
    }
    let plugin_dir = plugin_dir(&i.multiarch);
    let doc = format!("usr/share/doc/{pkg}");
    let wrapped_note = wrap(&i.source_note, 74, "    ");
    let fields: Vec<(&str, &str)> = vec![
        ("PACKAGE", &pkg),
        ("VERSION", &i.version),
        ("SUITE", debian.suite),
        ("SERIES", r.series),
        ("SLURM_RELEASE", r.upstream),
        ("SLURM_DEBIAN_VERSION", debian.version),
        ("PLUGIN_DIR", &plugin_dir),
        ("DOC_DIR", &doc),
        ("MAINTAINER", &i.maintainer),
        ("SOURCE_NOTE", &i.source_note),
        ("SOURCE_NOTE_WRAPPED", &wrapped_note),
    ];
    let template = |rel: &str| -> Result<String, String> { fill(&read_packaging_file(&i.packaging, rel)?, &fields, &format!("packaging/{rel}")) };

    // Plugins and CLI.
    let rel_plugin_dir = plugin_dir.trim_start_matches('/');
    let mut elves = Vec::new();
    for (src, name) in &i.built.plugins {
        let dst = stage.join(rel_plugin_dir).join(name);
        install_elf(src, &dst, 0o644, true)?;
        elves.push(dst);
    }
    let cli = stage.join("usr/bin/slurm-energy");
    install_elf(&i.built.cli, &cli, 0o755, false)?;
    elves.push(cli);

    // Docs and examples.
    write(&stage.join(&doc).join("copyright"), template("debian/copyright")?.as_bytes(), 0o644)?;
    write_gz(&stage.join(&doc).join("changelog.Debian.gz"), &template("debian/changelog.in")?)?;
    write(&stage.join(&doc).join("README.Debian"), template("debian/README.Debian.in")?.as_bytes(), 0o644)?;
    stage_examples_and_man(&stage, &doc, &i.packaging, &fields, &i.energy_toml, &i.built, &i.version)?;

    // Lintian overrides (each one justified in the file).
    let overrides = template("debian/lintian-overrides.in")?;
    let kept: Vec<&str> = overrides.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).collect();
    if !kept.is_empty() {
        write(&stage.join("usr/share/lintian/overrides").join(&pkg), overrides.as_bytes(), 0o644)?;
    }

    // Directories 0755, DEBIAN/md5sums and control.
    set_dir_modes(&stage)?;
    let files = files_under(&stage)?;
    let mut md5sums = String::new();
    let mut installed_kib = 0u64;
    for rel in &files {
        let out = Command::new("md5sum").arg(rel).current_dir(&stage).output().map_err(|e| format!("run md5sum: {e}"))?;
        if !out.status.success() {
            return Err(format!("md5sum {} failed ({})", rel.display(), out.status));
        }
        md5sums.push_str(&String::from_utf8_lossy(&out.stdout));
        let len = fs::metadata(stage.join(rel)).map_err(|e| format!("{}: {e}", rel.display()))?.len();
        installed_kib += len.div_ceil(1024);
    }
    write(&stage.join("DEBIAN/md5sums"), md5sums.as_bytes(), 0o644)?;
    let shlibs = shlibs_depends(&elves)?;
    let description = template("debian/description.in")?;
    let control = control_text(i, installed_kib, &shlibs, description.trim_end());
    write(&stage.join("DEBIAN/control"), format!("{control}\n").as_bytes(), 0o644)?;
    set_dir_modes(&stage)?;

    let deb = out_dir.join(format!("{pkg}_{}_{}.deb", i.version, i.arch));
    let out = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&stage)
        .arg(&deb)
        .output()
        .map_err(|e| format!("run dpkg-deb: {e}"))?;
    if !out.status.success() {
        return Err(format!("dpkg-deb --build failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    fs::remove_dir_all(&stage).map_err(|e| format!("remove {}: {e}", stage.display()))?;
    Ok(deb)
}

/// `text` in lines of at most `width` characters (words longer than that stay whole), every line
/// after the first starting with `indent` (a changelog item's continuation).
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let prefix = if lines.is_empty() { 0 } else { indent.len() };
        if !line.is_empty() && prefix + line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines.iter().enumerate().map(|(n, l)| if n == 0 { l.clone() } else { format!("{indent}{l}") }).collect::<Vec<_>>().join("\n")
}

pub(crate) fn set_dir_modes(dir: &Path) -> Result<(), String> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    for entry in fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
        if entry.file_type().map_err(|e| format!("{}: {e}", entry.path().display()))?.is_dir() {
            set_dir_modes(&entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_fields_and_names_unknown_ones() {
        let t = "a @X@ b\nemail user@host.example\nc @Y_Z@\n";
        assert_eq!(fill("a @X@", &[("X", "1")], "t"), Ok("a 1".to_string()));
        let err = fill(t, &[("X", "1")], "packaging/t").unwrap_err();
        assert_eq!(err, "packaging/t:3: unknown field @Y_Z@");
    }

    #[test]
    fn wrap_keeps_lines_short_and_indents_continuations() {
        let w = wrap("Built against the upstream Slurm 24.11.5 source without Debian's patches (long)", 30, "    ");
        assert_eq!(w, "Built against the upstream\n    Slurm 24.11.5 source\n    without Debian's patches\n    (long)");
        assert!(w.lines().all(|l| l.len() <= 30), "{w}");
        assert_eq!(wrap("", 10, "  "), "");
    }

    #[test]
    fn changelog_version_is_the_first_lines() {
        assert_eq!(changelog_version("@PACKAGE@ (0.1.0-1) @SUITE@; urgency=medium\n"), Ok("0.1.0-1".to_string()));
        assert!(changelog_version("pkg 0.1.0-1\n").unwrap_err().contains("no '(version)'"));
        assert!(changelog_version("pkg (x1) sid\n").unwrap_err().contains("does not start with a digit"));
    }

    #[test]
    fn the_changelog_version_is_the_workspace_version() {
        let packaging = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging");
        let v = package_version(&packaging).expect("packaging/debian/changelog.in");
        assert_eq!(v.split('-').next(), Some(env!("CARGO_PKG_VERSION")), "packaging/debian/changelog.in's version {v} is not the workspace's");
    }
}

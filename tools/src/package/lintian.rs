//! Runs `lintian` on a built package and sorts its findings by severity.

use std::path::Path;
use std::process::Command;

/// Lintian's findings on one package (`tag context`, without the package name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Info and pedantic tags.
    pub notes: Vec<String>,
    /// Tags the package's overrides file silences (shown with `--show-overrides`).
    pub overridden: Vec<String>,
}

/// Sorts lintian's output lines (`E: pkg: tag context`).
pub fn parse(output: &str) -> Findings {
    let mut f = Findings::default();
    for line in output.lines() {
        let Some((severity, rest)) = line.split_once(": ") else { continue };
        let finding = rest.split_once(": ").map_or(rest, |(_, tag)| tag).trim().to_string();
        match severity {
            "E" => f.errors.push(finding),
            "W" => f.warnings.push(finding),
            "I" | "P" | "C" => f.notes.push(finding),
            "O" => f.overridden.push(finding),
            _ => {}
        }
    }
    f
}

/// `lintian --pedantic --show-overrides <deb>`.
pub fn run(deb: &Path) -> Result<Findings, String> {
    let out = Command::new("lintian")
        .args(["--pedantic", "--display-info", "--show-overrides", "--fail-on", "none"])
        .arg(deb)
        .output()
        .map_err(|e| format!("run lintian: {e} (apt-get install lintian)"))?;
    if !out.status.success() {
        return Err(format!("lintian {} failed ({}): {}", deb.display(), out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

/// One line per finding, errors first.
pub fn format(f: &Findings) -> String {
    let mut s = format!(
        "lintian: {} error(s), {} warning(s), {} info/pedantic, {} overridden\n",
        f.errors.len(),
        f.warnings.len(),
        f.notes.len(),
        f.overridden.len()
    );
    for (mark, list) in [("E", &f.errors), ("W", &f.warnings), ("I", &f.notes), ("O", &f.overridden)] {
        for t in list {
            s.push_str(&format!("  {mark}: {t}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_sorted_by_severity() {
        let f = parse(
            "E: p: no-copyright-file\nW: p: binary-without-manpage [usr/bin/x]\nI: p: x\nP: p: y\nO: p: z [a]\nN: note\n",
        );
        assert_eq!(f.errors, vec!["no-copyright-file"]);
        assert_eq!(f.warnings, vec!["binary-without-manpage [usr/bin/x]"]);
        assert_eq!(f.notes.len(), 2);
        assert_eq!(f.overridden, vec!["z [a]"]);
        assert!(format(&f).starts_with("lintian: 1 error(s), 1 warning(s), 2 info/pedantic, 1 overridden\n"));
    }
}

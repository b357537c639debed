//! The package's man pages: `slurm-energy-hints(7)`, whose option list is made from what
//! `spank_energy.so` registers with Slurm (spank-energy's `man_options` example prints it), so
//! it cannot drift from the plugin; and `slurm-energy(1)` from the CLI's own `--help`.
//! Also reads the option names back out of a page and out of `sbatch --help`, for the tests
//! that compare them.

/// One `--energy-*` option as the SPANK plugin registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpankOption {
    /// Without the leading `--` (`energy-policy`).
    pub name: String,
    pub arginfo: String,
    pub usage: String,
}

/// Parses `name<TAB>arginfo<TAB>usage` lines; a bad line is an error with its number.
pub fn parse_spank_options(text: &str) -> Result<Vec<SpankOption>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, '\t');
        let (Some(name), Some(arginfo), Some(usage)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("spank-energy option list, line {}: want name<TAB>arginfo<TAB>usage, got {line:?}", i + 1));
        };
        if !name.starts_with("energy-") || name.contains(char::is_whitespace) {
            return Err(format!("spank-energy option list, line {}: {name:?} is not an --energy-* option name", i + 1));
        }
        out.push(SpankOption { name: name.to_string(), arginfo: arginfo.to_string(), usage: usage.to_string() });
    }
    if out.is_empty() {
        return Err("spank-energy option list is empty".into());
    }
    Ok(out)
}

/// Text for roff: backslashes and minus signs escaped, and a line that would start with `.` or
/// `'` protected.
pub fn roff_escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|l| if l.starts_with('.') || l.starts_with('\'') { format!("\\&{l}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `.TP` entries of the options, in the plugin's order.
pub fn options_roff(options: &[SpankOption]) -> String {
    let mut s = String::new();
    for o in options {
        if o.arginfo.is_empty() {
            // A flag (`--energy-whatif`): no `=ARG`.
            s.push_str(&format!(".TP\n.B \\-\\-{}\n{}\n", roff_escape(&o.name), roff_escape(&o.usage)));
        } else {
            s.push_str(&format!(".TP\n.BI \\-\\-{}= {}\n{}\n", roff_escape(&o.name), roff_escape(&o.arginfo), roff_escape(&o.usage)));
        }
    }
    s
}

/// `slurm-energy-hints(7)`: the template with `@OPTIONS@` replaced by the options.
pub fn hints_page(template: &str, options: &[SpankOption]) -> Result<String, String> {
    if !template.contains("@OPTIONS@\n") {
        return Err("packaging/man/slurm-energy-hints.7.in has no line @OPTIONS@".into());
    }
    Ok(template.replace("@OPTIONS@\n", &options_roff(options)))
}

/// `slurm-energy(1)`: the CLI's `--help` texts (top level first, then one per subcommand).
pub fn cli_page(version: &str, helps: &[(String, String)]) -> String {
    let mut s = String::new();
    s.push_str(&format!(".TH SLURM\\-ENERGY 1 \"\" \"slurm\\-energy {}\" \"User Commands\"\n", roff_escape(version)));
    s.push_str(".SH NAME\nslurm\\-energy \\- tools of the energy\\-aware Slurm plugin bundle for GPU clusters\n");
    s.push_str(".SH SYNOPSIS\n.B slurm\\-energy\n.I COMMAND\n[\\fIOPTIONS\\fR]\n");
    s.push_str(".SH DESCRIPTION\nThe text below is the program's own \\fB\\-\\-help\\fR output.\n");
    for (name, text) in helps {
        if name.is_empty() {
            s.push_str(".PP\n.nf\n");
        } else {
            s.push_str(&format!(".SS \"slurm\\-energy {}\"\n.nf\n", roff_escape(name)));
        }
        s.push_str(&roff_escape(text.trim_end()));
        s.push_str("\n.fi\n");
    }
    s.push_str(".SH SEE ALSO\n.BR slurm\\-energy\\-hints (7),\n.BR sbatch (1),\n.BR spank (8)\n");
    s
}

/// The `--energy-*` option names a man page documents (its `.BI \-\-energy\-NAME=` lines, and
/// `.B \-\-energy\-NAME` for a flag).
pub fn options_in_page(page: &str) -> Vec<String> {
    let mut names: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix(".BI \\-\\-").or_else(|| l.strip_prefix(".B \\-\\-")))
        .filter_map(|l| l.split('=').next())
        .map(|n| n.replace("\\-", "-"))
        .filter(|n| n.starts_with("energy-"))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The `--energy-*` option names `sbatch --help` lists (from loaded SPANK plugins).
pub fn options_in_help(help: &str) -> Vec<String> {
    let mut names: Vec<String> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--energy-"))
        .map(|rest| format!("energy-{}", rest.split(['=', '[']).next().unwrap_or("")))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Vec<SpankOption> {
        parse_spank_options("energy-policy\tPOLICY\tEnergy policy: performance, balanced or efficiency\nenergy-max-slowdown\tRATIO\tUp to 3.0\nenergy-whatif\t\tPrint the what-if\n")
            .expect("parse")
    }

    #[test]
    fn option_lines_parse_and_bad_lines_name_their_number() {
        let o = opts();
        assert_eq!(o.len(), 3);
        assert_eq!(o[1].arginfo, "RATIO");
        assert_eq!(o[2].arginfo, "", "a flag has no arginfo");
        let err = parse_spank_options("energy-policy\tPOLICY\tx\nenergy-share allow\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(parse_spank_options("gpu-freq\tX\ty\n").unwrap_err().contains("not an --energy-* option"));
        assert!(parse_spank_options("\n").is_err());
    }

    #[test]
    fn the_page_lists_exactly_the_options_and_reads_back() {
        let page = hints_page(".TH X 7\n.SH OPTIONS\n@OPTIONS@\n.SH END\n", &opts()).expect("page");
        assert!(page.contains(".BI \\-\\-energy\\-max\\-slowdown= RATIO\n"), "{page}");
        assert_eq!(options_in_page(&page), vec!["energy-max-slowdown", "energy-policy", "energy-whatif"]);
        assert!(page.contains(".B \\-\\-energy\\-whatif\n"), "{page}");
        assert!(hints_page(".TH X 7\n", &opts()).is_err());
    }

    #[test]
    fn roff_escape_protects_dashes_backslashes_and_leading_dots() {
        assert_eq!(roff_escape("a-b\\c\n.x\n'y"), "a\\-b\\ec\n\\&.x\n\\&'y");
    }

    #[test]
    fn options_in_help_reads_sbatch_help() {
        let help = "      --energy-policy=POLICY  Energy policy\n      --energy-share=allow|deny May share\n  --gpu-freq=x\n";
        assert_eq!(options_in_help(help), vec!["energy-policy", "energy-share"]);
    }

    #[test]
    fn cli_page_has_each_subcommand() {
        let page = cli_page("0.1.0-1", &[(String::new(), "Usage: slurm-energy <COMMAND>\n".into()), ("demo".into(), "Run -k\n".into())]);
        assert!(page.starts_with(".TH SLURM\\-ENERGY 1"), "{page}");
        assert!(page.contains(".SS \"slurm\\-energy demo\"\n.nf\nRun \\-k\n.fi\n"), "{page}");
    }
}

//! The sbatch options `slurm-energy whatif` understands: those that decide where, when and how
//! the planner places a job. Options that change nothing for the planner (names, output files,
//! mail, account) are ignored with a note; options that constrain placement in a way the
//! what-if does not model (node lists, constraints, dependencies, arrays, ...) are refused, so
//! that no estimate is shown for a job other than the one the user would submit.

use model::whatif::HintOptions;

/// A job as its sbatch options describe it, before the cluster fills in defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobOptions {
    /// `-N` (minimum of `N-M`).
    pub nodes: Option<u32>,
    /// `-n`.
    pub ntasks: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    /// `-c`.
    pub cpus_per_task: Option<u32>,
    /// `--gres=gpu[:type]:N`, `--gpus-per-node`.
    pub gpus_per_node: Option<u32>,
    /// `-G` / `--gpus` (whole job).
    pub gpus_total: Option<u32>,
    /// GPU type named in `--gres` / `--gpus` (`v100`), if any.
    pub gpu_type: Option<String>,
    /// `-t`, in seconds; `Some(None)` for `UNLIMITED`.
    pub time_limit_s: Option<Option<u64>>,
    /// `-p` (the first of a list).
    pub partition: Option<String>,
    /// `--mem` (MB per node; 0 = all of the node's).
    pub mem_mb_per_node: Option<u64>,
    pub mem_mb_per_cpu: Option<u64>,
    /// `--uid` (root only in sbatch): whose history to use.
    pub uid: Option<String>,
    pub hints: HintOptions,
    /// What was ignored or approximated, for the user to read.
    pub notes: Vec<String>,
    /// The batch script named on the command line, if any.
    pub script: Option<String>,
    /// `--wrap` was given (the script is that command).
    pub wrapped: bool,
}

/// Options that take a value, by every name sbatch gives them; the canonical long name first.
const VALUED: &[&[&str]] = &[
    &["nodes", "N"],
    &["ntasks", "n"],
    &["ntasks-per-node"],
    &["cpus-per-task", "c"],
    &["gres"],
    &["gpus", "G"],
    &["gpus-per-node"],
    &["time", "t"],
    &["partition", "p"],
    &["mem"],
    &["mem-per-cpu"],
    &["uid"],
    // Ignored: they do not change where or when the planner starts the job.
    &["job-name", "J"],
    &["output", "o"],
    &["error", "e"],
    &["input", "i"],
    &["chdir", "D"],
    &["account", "A"],
    &["comment"],
    &["mail-type"],
    &["mail-user"],
    &["export"],
    &["wrap"],
    &["open-mode"],
    &["signal"],
    &["time-min"],
    // Refused: placement the what-if does not model.
    &["nodelist", "w"],
    &["exclude", "x"],
    &["constraint", "C"],
    &["dependency", "d"],
    &["begin", "b"],
    &["array", "a"],
    &["reservation"],
    &["qos", "q"],
    &["gpus-per-task"],
    &["cpus-per-gpu"],
    &["mem-per-gpu"],
    &["licenses", "L"],
    &["nice"],
    &["energy-gpu-freq"],
];

const IGNORED: &[&str] = &["job-name", "output", "error", "input", "chdir", "account", "comment", "mail-type", "mail-user", "export", "wrap", "open-mode", "signal", "time-min", "parsable", "quiet", "verbose", "requeue", "no-requeue", "test-only"];
const FLAGS: &[&[&str]] = &[&["parsable"], &["quiet", "Q"], &["verbose", "v"], &["requeue"], &["no-requeue"], &["exclusive"], &["hold", "H"], &["test-only"], &["overcommit", "O"]];

fn canonical(name: &str, table: &[&'static [&'static str]]) -> Option<&'static str> {
    table.iter().find(|names| names.contains(&name)).map(|names| names[0])
}

/// Parses the options (command line after `whatif`; a batch script's `#SBATCH` lines are read
/// first, the command line overriding them, as sbatch does).
pub fn parse(args: &[String]) -> Result<JobOptions, String> {
    let mut opts = JobOptions::default();
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    let mut script: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            if name == "energy-whatif" {
                // spank_energy's own flag (sbatch --energy-whatif, or an #SBATCH line of it).
                continue;
            }
            if canonical(name, VALUED).is_some() || name.starts_with("energy-") {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        let v = args.get(i).ok_or_else(|| format!("--{name}: needs a value"))?.clone();
                        i += 1;
                        v
                    }
                };
                pairs.push((name.to_string(), Some(value)));
            } else {
                pairs.push((name.to_string(), inline));
            }
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let (letter, rest) = short.split_at(short.chars().next().map_or(0, char::len_utf8));
            if canonical(letter, VALUED).is_some() {
                let value = if !rest.is_empty() {
                    rest.trim_start_matches('=').to_string()
                } else {
                    let v = args.get(i).ok_or_else(|| format!("-{letter}: needs a value"))?.clone();
                    i += 1;
                    v
                };
                pairs.push((letter.to_string(), Some(value)));
            } else {
                pairs.push((short.to_string(), None));
            }
        } else if script.is_none() {
            script = Some(arg.clone());
            // What follows the script are the script's own arguments.
            break;
        }
    }
    if let Some(path) = &script {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let mut from_script = parse(&sbatch_lines(&text))?;
        from_script.notes.insert(0, format!("#SBATCH options read from {path}"));
        opts = from_script;
    }
    opts.script = script;
    opts.wrapped = pairs.iter().any(|(n, _)| n == "wrap");
    for (name, value) in pairs {
        apply(&mut opts, &name, value.as_deref())?;
    }
    Ok(opts)
}

/// The options of a batch script's `#SBATCH` lines (those before its first command).
pub fn sbatch_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().skip_while(|l| l.starts_with("#!")) {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') {
            break;
        }
        if let Some(rest) = line.strip_prefix("#SBATCH") {
            let rest = rest.split(" #").next().unwrap_or("");
            out.extend(rest.split_whitespace().map(str::to_string));
        }
    }
    out
}

fn number(name: &str, v: &str) -> Result<u32, String> {
    v.trim().parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| format!("--{name}={v}: not a positive whole number"))
}

fn apply(opts: &mut JobOptions, name: &str, value: Option<&str>) -> Result<(), String> {
    if name.starts_with("energy-") {
        let v = value.unwrap_or("");
        return match opts.hints.set(name, v)? {
            true => Ok(()),
            false if name == "energy-gpu-freq" => Err("--energy-gpu-freq: a fixed GPU clock is not planned by sched/energy; the what-if has nothing to compare".into()),
            false => Err(format!("--{name}: not an option of spank_energy (energy-policy, energy-max-slowdown, energy-share, energy-defer, energy-tag)")),
        };
    }
    let canon = canonical(name, VALUED).or_else(|| canonical(name, FLAGS));
    let Some(canon) = canon else {
        return Err(format!("{}{name}: not an sbatch option the what-if knows; leave it out (see `slurm-energy whatif --help`)", if name.len() == 1 { "-" } else { "--" }));
    };
    let v = value.unwrap_or("");
    match canon {
        "nodes" => {
            let min = v.split('-').next().unwrap_or("");
            opts.nodes = Some(number(canon, min)?);
            if v.contains('-') {
                opts.notes.push(format!("--nodes={v}: planned on its minimum, {min} node(s)"));
            }
        }
        "ntasks" => opts.ntasks = Some(number(canon, v)?),
        "ntasks-per-node" => opts.ntasks_per_node = Some(number(canon, v)?),
        "cpus-per-task" => opts.cpus_per_task = Some(number(canon, v)?),
        "gres" => {
            for item in v.split(',') {
                let parts: Vec<&str> = item.split(':').collect();
                match parts.as_slice() {
                    ["gpu"] => opts.gpus_per_node = Some(1),
                    ["gpu", n] if n.bytes().all(|b| b.is_ascii_digit()) => opts.gpus_per_node = Some(number(canon, n)?),
                    ["gpu", t, n] => {
                        opts.gpus_per_node = Some(number(canon, n)?);
                        opts.gpu_type = Some((*t).to_string());
                    }
                    ["gpu", t] => {
                        opts.gpus_per_node = Some(1);
                        opts.gpu_type = Some((*t).to_string());
                    }
                    _ => return Err(format!("--gres={v}: only GPUs (gpu[:type][:N]) are planned by sched/energy")),
                }
            }
        }
        "gpus" | "gpus-per-node" => {
            let (t, n) = match v.rsplit_once(':') {
                Some((t, n)) => (Some(t.to_string()), n),
                None => (None, v),
            };
            let n = number(canon, n)?;
            if canon == "gpus" { opts.gpus_total = Some(n) } else { opts.gpus_per_node = Some(n) }
            if t.is_some() {
                opts.gpu_type = t;
            }
        }
        "time" => opts.time_limit_s = Some(parse_time_limit(v).ok_or_else(|| format!("--time={v}: not a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED)"))?),
        "partition" => {
            let first = v.split(',').next().unwrap_or("").to_string();
            if v.contains(',') {
                opts.notes.push(format!("--partition={v}: planned in the first, {first}"));
            }
            opts.partition = Some(first);
        }
        "mem" => opts.mem_mb_per_node = Some(parse_mem_mb(v).ok_or_else(|| format!("--mem={v}: not a size (e.g. 4000, 16G)"))?),
        "mem-per-cpu" => opts.mem_mb_per_cpu = Some(parse_mem_mb(v).ok_or_else(|| format!("--mem-per-cpu={v}: not a size (e.g. 4000, 2G)"))?),
        "uid" => opts.uid = Some(v.to_string()),
        c if IGNORED.contains(&c) => opts.notes.push(format!("--{c}: ignored (changes nothing the planner decides)")),
        c => return Err(format!("--{c}: changes where or when the job may start in a way the what-if does not model; leave it out for an estimate")),
    }
    Ok(())
}

/// Seconds of a Slurm `--time` (`None` inside for UNLIMITED/INFINITE).
pub fn parse_time_limit(v: &str) -> Option<Option<u64>> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("unlimited") || v.eq_ignore_ascii_case("infinite") {
        return Some(None);
    }
    let num = |s: &str| -> Option<u64> { (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten() };
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, v),
    };
    let parts: Vec<u64> = rest.split(':').map(num).collect::<Option<_>>()?;
    let s = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(d), [h]) => d * 86_400 + h * 3600,
        (Some(d), [h, m]) => d * 86_400 + h * 3600 + m * 60,
        (Some(d), [h, m, s]) => d * 86_400 + h * 3600 + m * 60 + s,
        _ => return None,
    };
    Some(Some(s))
}

/// MB of a Slurm size (`4000`, `4000M`, `16G`, `1T`, `512K`).
pub fn parse_mem_mb(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits.parse().ok()?;
    match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MB" => Some(n),
        "K" | "KB" => Some(n.div_ceil(1024)),
        "G" | "GB" => n.checked_mul(1024),
        "T" | "TB" => n.checked_mul(1024 * 1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::types::EnergyPolicy;

    fn p(args: &[&str]) -> Result<JobOptions, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn the_options_that_matter_in_every_form() {
        let o = p(&["-N", "2", "-n4", "-c", "3", "--gres=gpu:v100:2", "-t", "1-02:30", "-p", "gpu,cpu", "--mem=16G", "--energy-policy=efficiency", "--energy-tag", "bert", "--energy-defer=2h"]).unwrap();
        assert_eq!(o.nodes, Some(2));
        assert_eq!(o.ntasks, Some(4));
        assert_eq!(o.cpus_per_task, Some(3));
        assert_eq!(o.gpus_per_node, Some(2));
        assert_eq!(o.gpu_type.as_deref(), Some("v100"));
        assert_eq!(o.time_limit_s, Some(Some(86_400 + 2 * 3600 + 30 * 60)));
        assert_eq!(o.partition.as_deref(), Some("gpu"));
        assert_eq!(o.mem_mb_per_node, Some(16 * 1024));
        assert_eq!(o.hints.policy, Some(EnergyPolicy::Efficiency));
        assert_eq!(o.hints.tag.as_deref(), Some("bert"));
        assert_eq!(o.hints.defer_s, Some(7200.0));
        assert!(o.notes.iter().any(|n| n.contains("first, gpu")), "{:?}", o.notes);
        let o = p(&["--gpus=4", "--time=90", "-J", "x", "--nodes=1-3"]).unwrap();
        assert_eq!(o.gpus_total, Some(4));
        assert_eq!(o.time_limit_s, Some(Some(5400)));
        assert_eq!(o.nodes, Some(1));
        assert!(o.notes.iter().any(|n| n.contains("job-name")) && o.notes.iter().any(|n| n.contains("minimum")), "{:?}", o.notes);
        let o = p(&["-G", "v100:2", "-t", "UNLIMITED", "--gres=gpu"]).unwrap();
        assert_eq!((o.gpus_total, o.gpus_per_node, o.time_limit_s), (Some(2), Some(1), Some(None)));
    }

    #[test]
    fn what_is_not_modelled_is_refused_with_the_option_named() {
        for (args, named) in [
            (&["-w", "n1"][..], "--nodelist"),
            (&["--constraint=a100"], "--constraint"),
            (&["--array=0-3"], "--array"),
            (&["--gres=nvme:1"], "--gres=nvme:1"),
            (&["--frobnicate"], "--frobnicate"),
            (&["--energy-policy=fast"], "fast"),
            (&["--energy-max-slowdown=0.9"], "--energy-max-slowdown"),
            (&["--energy-color=red"], "--energy-color"),
            (&["-t", "1:2:3:4"], "--time"),
            (&["--exclusive"], "--exclusive"),
            (&["-N"], "-N"),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(named), "{args:?}: {e}");
        }
    }

    #[test]
    fn a_scripts_sbatch_lines_come_first_and_the_command_line_wins() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("job.sh");
        std::fs::write(&script, "#!/bin/bash\n#SBATCH --gres=gpu:2 -t 30\n#SBATCH --energy-policy=efficiency # comment\n\necho hi\n#SBATCH -N 9\n").unwrap();
        let o = p(&["-t", "10", script.to_str().unwrap(), "--script-arg"]).unwrap();
        assert_eq!(o.gpus_per_node, Some(2));
        assert_eq!(o.time_limit_s, Some(Some(600)), "the command line wins");
        assert_eq!(o.hints.policy, Some(EnergyPolicy::Efficiency));
        assert_eq!(o.nodes, None, "#SBATCH after the first command is not an option");
    }

    #[test]
    fn the_energy_whatif_flag_is_skipped_and_the_script_is_known() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("job.sh");
        std::fs::write(&script, "#!/bin/bash\n#SBATCH --energy-whatif\n#SBATCH --gres=gpu:2\necho hi\n").unwrap();
        let o = p(&["--energy-whatif", "-t", "10", script.to_str().unwrap()]).unwrap();
        assert_eq!((o.gpus_per_node, o.time_limit_s, o.script.as_deref(), o.wrapped), (Some(2), Some(Some(600)), script.to_str(), false));
        let o = p(&["--wrap=hostname"]).unwrap();
        assert_eq!((o.script, o.wrapped), (None, true));
    }

    #[test]
    fn sizes_and_times() {
        assert_eq!(parse_mem_mb("512K"), Some(1));
        assert_eq!(parse_mem_mb("2T"), Some(2 * 1024 * 1024));
        assert_eq!(parse_mem_mb("2X"), None);
        assert_eq!(parse_time_limit("05:30"), Some(Some(330)));
        assert_eq!(parse_time_limit("2-0"), Some(Some(172_800)));
        assert_eq!(parse_time_limit("infinite"), Some(None));
        assert_eq!(parse_time_limit("-5"), None);
    }
}

//! `sbatch --energy-whatif`: like `--test-only`, the job is not submitted; instead the plugin
//! shows what `slurm-energy whatif` estimates for it (docs/whatif.md).
//!
//! SPANK gives a plugin in sbatch (allocator context) only its own options: sbatch's own
//! (`--gres`, `-t`, ...) are in sbatch's private option table, out of reach. So the what-if is
//! given sbatch's command line as the process has it (`/proc/self/cmdline`), after the
//! options the environment sets (`SBATCH_PARTITION`, `SBATCH_TIMELIMIT`, ... which sbatch ranks
//! below the command line and above the script, as the what-if ranks its arguments over the
//! script's `#SBATCH` lines), and reads the script's `#SBATCH` lines itself. It runs in
//! `slurm_spank_init_post_opt`, after sbatch has read every option and before it has contacted
//! slurmctld: the binary named in plugstack.conf (`whatif=/usr/bin/slurm-energy`, an absolute
//! path; no `PATH` lookup, never a shell) with the user's own rights, its output going straight
//! to the user; then sbatch ends with the what-if's exit status (0 when it printed an
//! estimate) without submitting anything.
//!
//! Refused, with a message naming `slurm-energy whatif`: a script read from standard input
//! (sbatch has read it by then; the what-if could not see its `#SBATCH` lines), heterogeneous
//! jobs (`:`), and salloc or srun (they start the job at once; there is nothing to print before).

use std::path::{Path, PathBuf};

/// The option's name (`sbatch --energy-whatif`).
pub const OPTION: &str = "energy-whatif";
/// Its usage line in `sbatch --help` (and in slurm-energy-hints(7), through the
/// `man_options` example).
pub const USAGE: &std::ffi::CStr = c"Print the energy what-if of the job (slurm-energy whatif) and do not submit it, like --test-only";
/// The plugstack.conf argument naming the `slurm-energy` binary.
pub const ARG_KEY: &str = "whatif";
/// Set in the what-if's environment: the arguments are sbatch's, so a missing script means one
/// sbatch read from standard input.
pub const FROM_SBATCH_ENV: &str = "SLURM_ENERGY_WHATIF_FROM_SBATCH";

/// `whatif=PATH` from the plugin's arguments (`None`: not configured). The path must be absolute.
pub fn binary_from_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Option<PathBuf>, String> {
    let mut found = None;
    for arg in args {
        if let Some(v) = arg.strip_prefix("whatif=") {
            let p = Path::new(v);
            if !p.is_absolute() {
                return Err(format!("plugstack.conf argument '{arg}': whatif takes the absolute path of the slurm-energy binary"));
            }
            found = Some(p.to_path_buf());
        }
    }
    Ok(found)
}

/// sbatch's environment options the what-if understands (or refuses by name), with the option
/// each stands for (sbatch's `env_vars` table).
const ENV_OPTIONS: &[(&str, &str)] = &[
    ("SBATCH_PARTITION", "partition"),
    ("SBATCH_TIMELIMIT", "time"),
    ("SBATCH_GRES", "gres"),
    ("SBATCH_GPUS", "gpus"),
    ("SBATCH_GPUS_PER_NODE", "gpus-per-node"),
    ("SBATCH_MEM_PER_NODE", "mem"),
    ("SBATCH_MEM_PER_CPU", "mem-per-cpu"),
    ("SBATCH_CONSTRAINT", "constraint"),
    ("SBATCH_QOS", "qos"),
    ("SBATCH_RESERVATION", "reservation"),
    ("SBATCH_ARRAY_INX", "array"),
    ("SBATCH_CPUS_PER_GPU", "cpus-per-gpu"),
    ("SBATCH_MEM_PER_GPU", "mem-per-gpu"),
    ("SBATCH_GPUS_PER_TASK", "gpus-per-task"),
    ("SBATCH_EXCLUSIVE", "exclusive"),
];

/// Is `arg` the option (or an unambiguous abbreviation getopt accepts: `--energy-w...`)?
fn is_the_option(arg: &str) -> bool {
    let Some(long) = arg.strip_prefix("--") else { return false };
    long.len() >= "energy-w".len() && OPTION.starts_with(long)
}

/// The arguments of `slurm-energy whatif` for sbatch's command line `argv` (with argv\[0\]) and
/// environment `env`: `whatif`, the environment's options, then the command line without the
/// option itself.
pub fn build_args(argv: &[String], env: &[(String, String)]) -> Result<Vec<String>, String> {
    if argv.iter().skip(1).any(|a| a == ":") {
        return Err("a heterogeneous job (':') is not planned by the what-if; run `slurm-energy whatif` with one component's options".into());
    }
    let mut out = vec!["whatif".to_string()];
    for (var, opt) in ENV_OPTIONS {
        if let Some((_, v)) = env.iter().find(|(k, _)| k == var) {
            out.push(if v.is_empty() { format!("--{opt}") } else { format!("--{opt}={v}") });
        }
    }
    let mut dropped = false;
    for arg in argv.iter().skip(1) {
        if !dropped && is_the_option(arg) {
            dropped = true;
            continue;
        }
        out.push(arg.clone());
    }
    Ok(out)
}

/// The command line of this process (`/proc/self/cmdline`: NUL-separated arguments).
pub fn own_argv() -> Result<Vec<String>, String> {
    let raw = std::fs::read("/proc/self/cmdline").map_err(|e| format!("cannot read sbatch's command line (/proc/self/cmdline): {e}"))?;
    Ok(raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
}

/// Is this process sbatch (the only client where the option means something)?
pub fn in_sbatch(argv: &[String]) -> bool {
    let name = |p: &str| Path::new(p).file_name().is_some_and(|n| n == "sbatch");
    argv.first().is_some_and(|a| name(a)) || std::env::current_exe().is_ok_and(|p| p.file_name().is_some_and(|n| n == "sbatch"))
}

/// The message for a client where the option does nothing useful.
pub fn only_sbatch_message() -> String {
    format!("--{OPTION} is for sbatch (salloc and srun start the job at once); run `slurm-energy whatif <sbatch options>` for an estimate")
}

/// Runs the what-if (`binary` with `args`, `whatif` first; no shell; its output goes to the
/// user) and returns the exit status sbatch should end with.
pub fn run(binary: &Path, args: &[String]) -> i32 {
    match std::process::Command::new(binary).args(args).env(FROM_SBATCH_ENV, "1").status() {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("sbatch: --{OPTION}: cannot run {}: {e}; nothing submitted", binary.display());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: &[&str]) -> Vec<String> {
        a.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_command_line_goes_through_without_the_option_after_the_environments() {
        let argv = s(&["/usr/bin/sbatch", "--energy-whatif", "--gres=gpu:2", "-t", "30", "job.sh", "--energy-whatif"]);
        let env = vec![("SBATCH_PARTITION".to_string(), "gpu".to_string()), ("HOME".to_string(), "/home/u".to_string()), ("SBATCH_TIMELIMIT".to_string(), "60".to_string())];
        assert_eq!(build_args(&argv, &env).unwrap(), s(&["whatif", "--partition=gpu", "--time=60", "--gres=gpu:2", "-t", "30", "job.sh", "--energy-whatif"]), "the script's own argument stays");
        // getopt's abbreviation.
        assert_eq!(build_args(&s(&["sbatch", "--energy-w", "--wrap=x"]), &[]).unwrap(), s(&["whatif", "--wrap=x"]));
        assert_eq!(build_args(&s(&["sbatch", "--energy-tag=x"]), &[]).unwrap(), s(&["whatif", "--energy-tag=x"]));
        // A flag from the environment.
        assert_eq!(build_args(&s(&["sbatch"]), &[("SBATCH_EXCLUSIVE".into(), String::new())]).unwrap(), s(&["whatif", "--exclusive"]));
    }

    #[test]
    fn heterogeneous_jobs_and_relative_binaries_are_refused() {
        assert!(build_args(&s(&["sbatch", "-N1", ":", "-N2", "job.sh"]), &[]).unwrap_err().contains("slurm-energy whatif"));
        assert_eq!(binary_from_args(["max_defer=1h", "whatif=/usr/bin/slurm-energy"]).unwrap(), Some(PathBuf::from("/usr/bin/slurm-energy")));
        assert_eq!(binary_from_args(["max_defer=1h"]).unwrap(), None);
        assert!(binary_from_args(["whatif=slurm-energy"]).unwrap_err().contains("absolute"));
    }

    #[test]
    fn only_sbatch_counts() {
        assert!(in_sbatch(&s(&["/usr/local/bin/sbatch", "x"])));
        assert!(!in_sbatch(&s(&["salloc"])) || std::env::current_exe().is_ok_and(|p| p.file_name().is_some_and(|n| n == "sbatch")));
        assert!(only_sbatch_message().contains("slurm-energy whatif"));
    }

    #[test]
    fn the_binary_runs_without_a_shell_with_whatif_first_and_its_status_is_returned() {
        let dir = std::env::temp_dir().join(format!("spank-energy-whatif-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("args");
        let fake = dir.join("slurm-energy");
        std::fs::write(&fake, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" \"$SLURM_ENERGY_WHATIF_FROM_SBATCH\" > {}\nexit 3\n", out.display())).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let code = run(&fake, &s(&["whatif", "--gres=gpu:1", "a b;$(x)"]));
        assert_eq!(code, 3);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "whatif\n--gres=gpu:1\na b;$(x)\n1\n", "arguments passed as they are, no shell");
        assert_eq!(run(Path::new("/nonexistent/slurm-energy"), &s(&["whatif"])), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

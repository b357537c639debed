//! `tools/slurm-release.sh` builds only part of Slurm by default (its `COMMANDS` and `PLUGINS`
//! lists): every Slurm command the tests run and every stock plugin their configurations name must
//! be on those lists, or the live tests fail on a fresh machine's partial build only. No build runs
//! here: the lists are read from the script, the names from the tests' sources.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn project() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The words of the bash array `NAME=( ... )` in the script.
fn script_array(script: &str, name: &str) -> BTreeSet<String> {
    let start = script.find(&format!("\n{name}=(")).unwrap_or_else(|| panic!("tools/slurm-release.sh has no array {name}"));
    let body = &script[start + name.len() + 3..];
    let end = body.find(')').expect("array closed");
    body[..end].split_whitespace().map(str::to_string).collect()
}

/// The Rust sources under the tests' directories (the test clusters, the live tests, the tools).
fn test_sources() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = [
        "tests/cluster/src",
        "slurm-sched-plugin/tests",
        "spank-energy/tests",
        "gres-energy-plugin/tests",
        "cli-filter-energy/tests",
        "tools/tests",
        "tools/src",
    ]
    .iter()
    .map(|d| project().join(d))
    .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tools/tests/slurm_release.rs") {
                let text = fs::read_to_string(&path).expect("read a test source");
                out.push((path, text));
            }
        }
    }
    out
}

/// Stock plugin types whose plugins a configuration line names as `type/name`.
const PLUGIN_TYPES: &[&str] = &[
    "accounting_storage", "acct_gather_energy", "acct_gather_profile", "auth", "burst_buffer", "cgroup", "cli_filter",
    "cred", "gpu", "hash", "job_container", "job_submit", "jobacct_gather", "jobcomp", "mcs", "mpi", "namespace",
    "node_features", "preempt", "prep", "priority", "proctrack", "sched", "select", "serializer", "site_factor",
    "switch", "task", "tls", "topology",
];

/// The bundle's own plugins (built by cargo, not by Slurm's make).
const BUNDLE_PLUGINS: &[&str] = &["sched/energy", "cli_filter/energy", "acct_gather_energy/nvml", "gpu/nvml"];

/// Plugin names in configuration text: `type/name` right after `=`, `,` or `"` (a line or a
/// string literal, not prose), and the GresTypes= values as `gres/name`.
fn named_plugins(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    for ty in PLUGIN_TYPES {
        let pat = format!("{ty}/");
        let mut from = 0;
        while let Some(i) = text[from..].find(&pat) {
            let at = from + i;
            from = at + pat.len();
            if at == 0 || !matches!(bytes[at - 1], b'=' | b',' | b'"') {
                continue;
            }
            let name: String = text[from..].chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')).collect();
            if !name.is_empty() {
                found.insert(format!("{ty}/{name}"));
            }
        }
    }
    let mut from = 0;
    while let Some(i) = text[from..].find("GresTypes=") {
        from += i + "GresTypes=".len();
        let value: String = text[from..].chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',')).collect();
        found.extend(value.split(',').filter(|g| !g.is_empty()).map(|g| format!("gres/{g}")));
    }
    found
}

#[test]
fn partial_build_has_every_plugin_the_tests_configure() {
    let script = fs::read_to_string(project().join("tools/slurm-release.sh")).expect("read tools/slurm-release.sh");
    let plugins = script_array(&script, "PLUGINS");
    // No build has burst_buffer/lua: configure runs --without-lua (its test expects that).
    assert!(script.contains("--without-lua"), "the script configures Lua in: burst_buffer/lua must be on PLUGINS");
    let mut missing = Vec::new();
    for (path, text) in test_sources() {
        for plugin in named_plugins(&text) {
            let built_in = plugin.ends_with("/none");
            // "sched/energy-like" in a policy's description is still ours.
            let ours = BUNDLE_PLUGINS.iter().any(|b| plugin == *b || plugin.starts_with(&format!("{b}-")));
            if built_in || ours || plugin == "burst_buffer/lua" || plugins.contains(&plugin) {
                continue;
            }
            missing.push(format!("{plugin} ({})", path.strip_prefix(project()).unwrap_or(&path).display()));
        }
    }
    assert!(missing.is_empty(), "plugins the tests configure that a partial tools/slurm-release.sh build leaves out: {missing:?}");
    // What the tests' slurm.conf writes without a choice, and what the daemons load unasked.
    for plugin in ["select/cons_tres", "sched/backfill", "auth/munge", "cred/munge", "hash/k12", "tls/none", "prep/script", "topology/flat", "mpi/pmi2", "certgen/script"] {
        assert!(plugins.contains(plugin), "PLUGINS lacks {plugin}");
    }
}

#[test]
fn partial_build_has_every_command_the_tests_run() {
    let script = fs::read_to_string(project().join("tools/slurm-release.sh")).expect("read tools/slurm-release.sh");
    let commands = script_array(&script, "COMMANDS");
    let slurm_commands = [
        "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab", "sdiag", "sinfo",
        "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger",
    ];
    let mut missing = BTreeSet::new();
    for (path, text) in test_sources() {
        for c in slurm_commands {
            if text.contains(&format!("\"{c}\"")) && !commands.contains(c) {
                missing.insert(format!("{c} ({})", path.strip_prefix(project()).unwrap_or(&path).display()));
            }
        }
    }
    assert!(missing.is_empty(), "Slurm commands the tests run that a partial tools/slurm-release.sh build leaves out: {missing:?}");
}

#[test]
fn named_plugins_reads_lines_and_literals_not_prose() {
    let text = "line(\"SelectType=select/linear\"); // prose about sched/backfill\nlet t = \"topology/tree\"; GresTypes=gpu,shard\n";
    let found = named_plugins(text);
    let want: BTreeSet<String> = ["select/linear", "topology/tree", "gres/gpu", "gres/shard"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, want);
}

//! `slurm-energy`: command-line tools of the energy-aware Slurm bundle.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use model::data::default_data_dir;
use tools::sim::report;
use tools::sim::Workload;
use tools::sim::policies::{ALL, IDEAS, Policy, Setup};
use tools::sim::spec::ClusterSpec;
use tools::sim::trace_part::{TracePart, TraceWindow, parse_date};

#[derive(Parser)]
#[command(name = "slurm-energy", version, about = "Tools of the energy-aware Slurm plugin bundle for GPU clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a job trace through the planner under several policies and compare energy,
    /// carbon and job completion times.
    ///
    /// Ground truth (how fast and at what power jobs run, alone, shared or at a lower clock)
    /// comes from measured data (Gavel, Zeus, Synergy, V100 logs); the planner only sees what
    /// slurmctld would see: time limits, hints and its own predictions.
    Simulate(SimulateArgs),
    /// Bring up a real Slurm cluster on this machine with the bundle's plugins, run a small
    /// workload with energy hints, and print what sched/energy decided for each job.
    ///
    /// Needs root on Debian 12. Steps: runs tools/slurm-env.sh (installs Slurm, munge, MariaDB
    /// and libclang, fetches and configures the matching Slurm source tree; fast when already
    /// done), builds sched_energy.so and spank_energy.so with cargo, starts munged, MariaDB,
    /// slurmdbd, slurmctld and 3 slurmd with 4 fake GPUs each on loopback (all state in one temp
    /// dir, SchedulerType=sched/energy, spank_energy.so in plugstack.conf, etc/energy.toml),
    /// submits 10 jobs with different --energy-policy/--energy-share/--energy-max-slowdown hints
    /// and --gres=gpu:N, waits for them, and prints one line per job: id, name, GPUs, hints,
    /// nodes, state, elapsed time, energy (sacct ConsumedEnergy; "-" until a GPU energy plugin
    /// is loaded) and the decision record sched/energy wrote into the job's admin comment
    /// (policy, GPU clock predicted from the measured data, sharing, predicted slowdown and
    /// energy). Then it stops every daemon it started (by pid) and removes the temp dir, unless
    /// --keep.
    Demo(DemoArgs),
    /// Soak test with faults: run thousands of jobs of mixed shapes and energy hints through a
    /// local cluster with every plugin of the bundle and accounting, while slurmctld is restarted
    /// (SIGTERM and SIGKILL), a slurmd is restarted, slurmstepd processes are killed, NVML calls
    /// fail and `scontrol reconfigure` runs with a broken and a good energy.toml; then check that
    /// every job ended exactly once and is in sacct, none started twice, every GPU is back at its
    /// clocks, the clock ledgers are empty and slurmctld's memory stayed bounded.
    ///
    /// Needs root on Debian 12, like `demo`. Exit status 0 only when every check passed.
    Soak(SoakArgs),
    /// Build the package of the plugins for one Slurm release: a .deb (--format deb, default)
    /// or an RPM (--format rpm) in target/packages.
    ///
    /// The .deb depends on Debian's Slurm packages of exactly that release (bookworm's 22.05.8,
    /// trixie's 24.11.5, forky's 26.05.5); the RPM requires SchedMD's `slurm` RPM of exactly
    /// that release (22.05.8, 24.11.5, 25.11.7, 26.05.3). Either installs the plugins into that
    /// Slurm's plugin directory, this CLI, a man page of the --energy-* options and example
    /// configuration under /usr/share/doc. Needs root on Debian 12 (it prepares the release's
    /// Slurm source tree with tools/slurm-env.sh or tools/slurm-release.sh), cargo and dpkg-dev
    /// (and rpm for an RPM).
    Package(tools::package::cli::PackageArgs),
    /// Energy and carbon report of the cluster's jobs over a time window, from the accounting
    /// records of the cluster SLURM_CONF names (`sacct`): per user, account, partition, tag
    /// and job; GPU-hours at each clock; energy saved against the default clock (estimate);
    /// top jobs; decision-record statistics. A text table on the terminal, and with --json /
    /// --html the same as JSON and a self-contained HTML page with plots (docs/report.md).
    Report(ReportArgs),
    /// Check the simulator against the live cluster: replay compressed Philly jobs on a local
    /// Slurm cluster with fake GPUs under sched/backfill and sched/energy, simulate the same
    /// jobs, and print both side by side with their energy and mean-JCT ratios (docs/replay.md).
    ///
    /// Needs root on Debian 12, like `demo` (not with --sim-only).
    Replay(tools::replay::cli::ReplayArgs),
    /// What sched/energy would do with a job before it is submitted: its expected start, run
    /// time, GPU energy, carbon and nodes under each policy (performance, balanced,
    /// efficiency) and with its deferral window, from the live cluster (scontrol), the
    /// energy.toml beside slurm.conf and the learnt history of this user and tag
    /// (docs/whatif.md).
    ///
    /// Give the job's sbatch options (or its batch script, whose #SBATCH lines are read):
    /// -N, -n, -c, --ntasks-per-node, --gres=gpu[:type]:N, -G/--gpus, --gpus-per-node, -t,
    /// -p, --mem, --mem-per-cpu, --uid and the --energy-* options. Names, output files, mail
    /// and account are ignored (with a note); options that constrain placement in ways the
    /// what-if does not model (-w, -x, -C, -d, --array, --exclusive, ...) are refused.
    /// Example: `slurm-energy whatif --gres=gpu:2 -t 2:00:00 --energy-tag=bert`.
    Whatif(WhatifArgs),
    /// Run a paper's baseline (eaco, synergy) in a setup like its paper's against the paper's
    /// own baseline, paired over seeds, and print energy, runtime and JCT ratios with 95 %
    /// intervals (docs/results.md, "Baselines against their papers").
    PaperSetup(tools::sim::paper_setups::PaperSetupArgs),
    /// The program a replayed job runs: advances its work at the simulator's ground-truth rate
    /// for the clock its fake GPUs run at, and makes them draw the truth's power.
    #[command(hide = true)]
    Workload(tools::replay::cli::WorkloadCliArgs),
}

#[derive(Args)]
struct WhatifArgs {
    /// Write the what-if as JSON to this file (`-` for standard output, instead of the table).
    #[arg(long)]
    json: Option<PathBuf>,
    /// The energy.toml to read. Default: the one beside the slurm.conf scontrol names.
    #[arg(long)]
    energy_toml: Option<PathBuf>,
    /// sched/energy's learning state. Default: `[learning] state_file`, else
    /// energy-learning.json in StateSaveLocation.
    #[arg(long)]
    learning_state: Option<PathBuf>,
    /// The job's sbatch options (and optionally its batch script), as given to sbatch.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    sbatch: Vec<String>,
}

fn whatif(a: WhatifArgs) -> Result<(), String> {
    let opts = tools::whatif::WhatifOptions { sbatch: a.sbatch, energy_toml: a.energy_toml, learning_state: a.learning_state, ..Default::default() };
    let report = tools::whatif::run(&opts)?;
    match a.json.as_deref() {
        Some(p) if p == std::path::Path::new("-") => println!("{}", tools::whatif::render::json(&report)?),
        Some(p) => {
            std::fs::write(p, tools::whatif::render::json(&report)?).map_err(|e| format!("{}: {e}", p.display()))?;
            print!("{}", tools::whatif::render::text(&report));
        }
        None => print!("{}", tools::whatif::render::text(&report)),
    }
    Ok(())
}

#[derive(Args)]
struct ReportArgs {
    /// Start of the window (YYYY-MM-DD[THH:MM[:SS]] or now-N[seconds|minutes|hours|days|weeks]);
    /// default: sacct's (midnight today).
    #[arg(long)]
    start: Option<String>,
    /// End of the window (same forms); default: now.
    #[arg(long)]
    end: Option<String>,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the report as one self-contained HTML page with plots to this file.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Grid carbon intensity (`Time,Carbon Intensity` CSV) for jobs whose decision record has
    /// no carbon_g= figure. Default: the `[carbon] source` of --energy-toml.
    #[arg(long)]
    carbon: Option<PathBuf>,
    /// The energy.toml whose `[carbon] source` to use without --carbon. Default: energy.toml
    /// beside the slurm.conf SLURM_CONF names, if there is one.
    #[arg(long)]
    energy_toml: Option<PathBuf>,
    /// Read sacct output from this file (captured with the fields of docs/report.md) instead
    /// of running sacct.
    #[arg(long)]
    sacct_file: Option<PathBuf>,
    /// Measured data (zeus/) whose clock/power curves estimate the energy at the default clock.
    /// Default: $SLURM_ENERGY_DATA, else ../shared/data next to the project.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The GPU model whose curves estimate the savings (v100, a40, p100, rtx6000).
    #[arg(long, default_value = "v100")]
    gpu_model: String,
    /// Do not print the text table.
    #[arg(long)]
    quiet: bool,
}

fn acct_report(a: ReportArgs) -> Result<(), String> {
    let opts = tools::acct_report::ReportOptions {
        start: a.start,
        end: a.end,
        sacct_file: a.sacct_file,
        sacct: None,
        carbon_file: a.carbon,
        energy_toml: a.energy_toml,
        data_dir: Some(a.data.unwrap_or_else(default_data_dir)),
        gpu_model: a.gpu_model,
    };
    let report = tools::acct_report::build(&opts)?;
    if let Some(path) = &a.json {
        std::fs::write(path, tools::acct_report::to_json(&report)?).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &a.html {
        std::fs::write(path, tools::acct_report::html::render(&report)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if !a.quiet {
        print!("{}", tools::acct_report::text::render(&report));
    }
    Ok(())
}

#[derive(Args)]
struct SoakArgs {
    /// Jobs to run (array tasks count one by one).
    #[arg(long, default_value_t = 10_000)]
    jobs: u32,
    /// Jobs submitted between two faults (0: no faults).
    #[arg(long, default_value_t = 400)]
    faults_every: u32,
    /// Only these kinds of fault, in turn (comma-separated; default: every kind), e.g.
    /// `--faults slurmctld-kill` to measure what SIGKILLs of slurmctld do.
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<tools::soak::Fault>,
    /// Run sched/energy with `save_before_launch = false`: launches leave at once, as under
    /// sched/backfill (to measure what saving each start before its launch changes).
    #[arg(long)]
    launch_before_save: bool,
    /// Jobs pending or running at most; submission waits below it.
    #[arg(long, default_value_t = 300)]
    max_queued: u32,
    /// Stop and fail after this many minutes.
    #[arg(long, default_value_t = 120)]
    max_minutes: u64,
    /// Seed of the job mix and of the faults' targets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// SchedulerType: sched/energy, or sched/backfill to run the same soak on Slurm's own
    /// scheduler for comparison.
    #[arg(long, default_value = "sched/energy")]
    sched: String,
    /// Write the report (states, faults, memory samples, problems) as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run slurmctld and slurmd as sites run them from systemd (daemonised, `--systemd` with a
    /// notify socket where the release has it; a reconfigure re-executes slurmctld on 24.11),
    /// and add log rotation (SIGHUP) to the faults.
    #[arg(long)]
    site_mode: bool,
    /// The project's source tree (see `demo`).
    #[arg(long)]
    project_dir: Option<PathBuf>,
    /// Do not run tools/slurm-env.sh (SLURM_SRC_DIR must then be set for the plugin build).
    #[arg(long)]
    no_install: bool,
    /// Measured data for sched/energy's predictor (default as for `demo`).
    #[arg(long)]
    data: Option<PathBuf>,
}

fn soak(a: SoakArgs) -> Result<(), String> {
    tools::demo::require_root()?;
    let project = a.project_dir.unwrap_or_else(tools::demo::default_project_dir);
    let slurm_src = if a.no_install { None } else { Some(tools::demo::prepare_environment(&project)?) };
    let plugins = tools::demo::build_plugins(&project, slurm_src.as_deref(), true, None)?;
    let mut energy_toml = std::fs::read_to_string(project.join("etc").join("energy.toml")).map_err(|e| format!("etc/energy.toml: {e}"))?;
    if a.launch_before_save {
        energy_toml = tools::soak::with_launch_before_save(&energy_toml);
    }
    let data = a.data.unwrap_or_else(default_data_dir);
    let opts = tools::soak::SoakOptions {
        jobs: a.jobs,
        max_duration: std::time::Duration::from_secs(a.max_minutes * 60),
        seed: a.seed,
        faults_every: a.faults_every,
        fault_kinds: a.faults,
        max_queued: a.max_queued,
        plugins,
        energy_toml,
        data_dir: data.join("zeus").is_dir().then(|| std::fs::canonicalize(&data).unwrap_or(data)),
        progress: std::io::stderr().is_terminal(),
        sched_type: a.sched,
        site_mode: a.site_mode,
    };
    eprintln!(
        "slurm-energy soak: {} jobs, a fault every {} jobs, at most {} queued, seed {}, at most {} min",
        a.jobs, a.faults_every, a.max_queued, a.seed, a.max_minutes
    );
    let report = tools::soak::run_soak(&opts)?;
    print!("{}", report.summary());
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    if report.passed() { Ok(()) } else { Err(format!("the soak found {} problem(s)", report.problems.len())) }
}

#[derive(Args)]
struct DemoArgs {
    /// Leave the cluster running afterwards and print how to use it (SLURM_CONF=... sinfo,
    /// sbatch with hints) and how to stop it (the daemons' pids).
    #[arg(long)]
    keep: bool,
    /// The project's source tree (tools/slurm-env.sh, etc/energy.toml, the plugin crates).
    /// Default: the tree this binary was built from, else the current directory.
    #[arg(long)]
    project_dir: Option<PathBuf>,
    /// Do not run tools/slurm-env.sh (SLURM_SRC_DIR must then be set for the plugin build).
    #[arg(long)]
    no_install: bool,
    /// Use already built plugins from this directory (sched_energy.so or libsched_energy.so,
    /// and the same for spank_energy) instead of building them.
    #[arg(long)]
    plugins: Option<PathBuf>,
    /// Give up waiting for the workload after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Measured data (zeus/, gavel/, ...) that sched/energy fits its clock and power predictor
    /// to. Default: $SLURM_ENERGY_DATA, else ../shared/data next to the project; when absent,
    /// jobs run at the default clock.
    #[arg(long)]
    data: Option<PathBuf>,
}

fn demo(a: DemoArgs) -> Result<(), String> {
    let opts = tools::demo::DemoOptions {
        project_dir: a.project_dir.unwrap_or_else(tools::demo::default_project_dir),
        install: !a.no_install,
        plugins: match a.plugins {
            Some(dir) => tools::demo::Plugins::Prebuilt(dir),
            None => tools::demo::Plugins::Build { release: true, target_dir: None },
        },
        workload: tools::demo::default_workload(),
        keep: a.keep,
        timeout: std::time::Duration::from_secs(a.timeout_s),
        progress: std::io::stderr().is_terminal(),
        data_dir: Some(a.data.unwrap_or_else(default_data_dir)),
    };
    let report = tools::demo::run_demo(&opts)?;
    tools::demo::print_table(&report.rows);
    if let Some(kept) = report.kept {
        println!();
        print!("{kept}");
    }
    Ok(())
}

#[derive(Args)]
struct SimulateArgs {
    /// Trace CSV: the Philly trace as published, or the generic format
    /// (submit_time_s,duration_s,num_gpus[,job_type,user,num_cpus,mem_gb,priority]; see
    /// docs/trace-format.md). Default: <data>/traces/philly.csv.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Cluster spec (TOML). Default: etc/cluster-philly.toml (compiled in).
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Carbon-intensity CSV (Time,Carbon Intensity). Default: the spec's [carbon] file.
    #[arg(long)]
    carbon: Option<PathBuf>,
    /// Directory of the measured data (zeus/, gavel/, synergy/, carbon/, traces/).
    /// Default: $SLURM_ENERGY_DATA, else ../shared/data next to the project.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Policies to run, comma-separated: slurm, slurm-powersave, eaco, powerflow, greenflow,
    /// synergy, union (powerflow + synergy's CPUs + eaco's sharing, stacked), energy, and oracle (a lower bound on energy under the same truth: each job at
    /// the least energy per unit of work over every choice a policy may make, no waiting, hosts
    /// on only while busy). Default: all.
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Run each policy over a sweep of its own knobs (slowdown bound, power cap on/off, sharing
    /// bound, PowerFlow's and GreenFlow's energy price, each also without re-allocation of running jobs) instead of one setting each, and report energy vs mean JCT and p99 JCT frontiers,
    /// the best mean JCT of each policy within energy budgets, and PowerFlow's and GreenFlow's mean JCT at slurm-powersave's
    /// energy / carbon (the papers' comparison). --policies filters the sweep.
    #[arg(long)]
    frontier: bool,
    /// Also run the `energy` policy with each of its ideas switched off in turn, and the papers'
    /// policies named in --policies with one of theirs off (eaco-no-consolidation,
    /// powerflow-no-elastic, powerflow-no-realloc, powerflow-no-clocks, greenflow-no-elastic,
    /// greenflow-no-realloc, greenflow-no-carbon-price, union-no-elastic).
    #[arg(long)]
    ablation: bool,
    /// Ground truth of two jobs sharing a GPU: Gavel's "physical" cluster measurements or its
    /// "simulated" table. Default: the spec's [truth] colocation (physical).
    #[arg(long)]
    colocation_truth: Option<String>,
    /// Idle host power of a powered-on node in W (overrides the spec's power.node_base_w; for
    /// the sensitivity of the results to it).
    #[arg(long)]
    node_base_w: Option<f64>,
    /// Let every policy but slurm and slurm-powersave plan only every SECONDS of simulated
    /// time, as sched/energy does (its `[sched] interval_s`, default 5, with slurmctld's main
    /// scheduler off); stock Slurm's main scheduler starts jobs on events. Default 0: every
    /// policy plans at every arrival and end.
    #[arg(long, default_value_t = 0.0)]
    cycle_interval_s: f64,
    /// Keep a shared pair together even when its early-stage observation is worse than the
    /// sharing bound (it is still learnt from), as sched/energy does live; by default the
    /// newcomer is requeued, as EaCO does.
    #[arg(long)]
    no_early_separation: bool,
    /// Cap the cluster's GPU power by this cap file (sched/energy's format, docs/power-cap.md)
    /// in the `energy` policy and its ablations: new starts under the cap, running jobs' clocks
    /// lowered as sched/energy does. Its times are on the carbon series' calendar (the trace's
    /// first submit on the same day and time of 2020; 2020-01-01T00:00:00Z without dates).
    #[arg(long, value_name = "FILE")]
    power_cap: Option<PathBuf>,
    /// Replay only the jobs submitted from this date on (UTC, YYYY-MM-DD or "YYYY-MM-DD
    /// HH:MM:SS"; a trace with dates, i.e. Philly: 2017-09-04 .. 2017-12-22). A job belongs to
    /// the part its submit falls in and runs to its end there. Tune on one part, report on
    /// another (docs/results.md, "tuning split").
    #[arg(long, value_name = "DATE")]
    trace_from: Option<String>,
    /// Replay only the jobs submitted before this date (UTC, as --trace-from).
    #[arg(long, value_name = "DATE")]
    trace_until: Option<String>,
    /// Replay only one half of the trace's submit period, split at the midpoint between its
    /// first and last submit: first-half or second-half (any trace; Philly: 2017-10-28 21:16).
    #[arg(long, value_name = "PART", conflicts_with_all = ["trace_from", "trace_until"])]
    trace_part: Option<String>,
    /// Replay only the first N jobs (by submit time; of the part, with --trace-from,
    /// --trace-until or --trace-part).
    #[arg(long)]
    jobs: Option<usize>,
    /// Seed for every random draw (job types, time limits, hints); with --seeds, the first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run every policy under this many seeds (seed, seed+1, ...): the table and --json give
    /// each metric as a mean with its 95 % confidence interval, and ratios to slurm-powersave
    /// and slurm paired by seed. Plots and --jobs-csv show the first seed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    seeds: u64,
    /// Worker threads (one policy per thread).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Write the results as JSON: under "policies" each metric of each policy as
    /// {"mean": .., "ci95": ..}; under "vs_slurm-powersave" and "vs_slurm" the paired ratio and
    /// difference of the main metrics; under "per_seed" every run's raw metrics.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write SVG plots into this directory (JCT CDF, energy by category, cluster power).
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Write one CSV per policy with every job's submit, start and end times into this directory.
    #[arg(long)]
    jobs_csv: Option<PathBuf>,
}

fn simulate(a: SimulateArgs) -> Result<(), String> {
    let data_dir = a.data.unwrap_or_else(default_data_dir);
    let trace_path = a.trace.unwrap_or_else(|| data_dir.join("traces").join("philly.csv"));
    let mut spec = ClusterSpec::load(a.cluster.as_deref()).map_err(|e| e.to_string())?;
    if let Some(w) = a.node_base_w {
        if !(w.is_finite() && w >= 0.0) {
            return Err(format!("--node-base-w {w}: must be a finite number >= 0"));
        }
        spec.power.node_base_w = w;
    }
    if let Some(c) = &a.colocation_truth {
        spec.truth.colocation = tools::sim::spec::Colocation::parse(c)?;
    }
    let policies: Vec<Policy> = if a.policies.is_empty() {
        ALL.to_vec()
    } else {
        a.policies.iter().map(|p| Policy::parse(p.trim())).collect::<Result<_, _>>()?
    };
    let points: Vec<tools::sim::frontier::Point> = if a.frontier {
        tools::sim::frontier::sweep(&spec).into_iter().filter(|p| policies.iter().any(|q| q.name() == p.policy || p.policy.starts_with(&format!("{}-", q.name())))).collect()
    } else {
        Vec::new()
    };
    let mut setups: Vec<Setup> = if a.frontier {
        points.iter().map(|p| p.setup.clone()).collect()
    } else {
        policies.iter().filter_map(|p| Setup::for_policy(*p, &spec)).collect()
    };
    let with_oracle = policies.contains(&Policy::Oracle);
    if a.ablation {
        setups.extend(IDEAS.iter().filter_map(|idea| Setup::energy_without(idea, &spec)));
        setups.extend(Setup::paper_ablations(&spec).into_iter().filter(|s| policies.iter().any(|p| s.name.starts_with(&format!("{}-", p.name())))));
    }
    if !(a.cycle_interval_s.is_finite() && (0.0..=86_400.0).contains(&a.cycle_interval_s)) {
        return Err(format!("--cycle-interval-s {}: must be between 0 and 86400 seconds", a.cycle_interval_s));
    }
    for s in setups.iter_mut().filter(|s| !matches!(s.name.as_str(), "slurm" | "slurm-powersave")) {
        s.cycle_interval_s = a.cycle_interval_s;
        s.early_separation = !a.no_early_separation;
    }
    let window = TraceWindow {
        from_unix_s: a.trace_from.as_deref().map(|d| parse_date("--trace-from", d)).transpose()?,
        until_unix_s: a.trace_until.as_deref().map(|d| parse_date("--trace-until", d)).transpose()?,
        part: a.trace_part.as_deref().map(TracePart::parse).transpose()?,
    };
    let load_start = std::time::Instant::now();
    let mut trace = tools::trace::load_trace(&trace_path, None).map_err(|e| e.to_string())?;
    let jobs_in_file = trace.jobs.len();
    window.apply(&mut trace).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    if let Some(n) = a.jobs {
        trace.jobs.truncate(n);
    }
    let mut workload = Workload::from_trace(spec, &data_dir, &trace_path, trace, a.carbon.as_deref(), a.seed)?;
    if !window.is_whole() {
        eprintln!("slurm-energy: replaying {} of the trace's {jobs_in_file} jobs, submitted from {} on", workload.trace.jobs.len(), workload.trace.start_unix_s.map_or_else(|| "its part's first submit".to_string(), |s| format!("unix time {s}")));
    }
    if let Some(p) = &a.power_cap {
        workload.set_power_cap_file(p)?;
    }
    let load_s = load_start.elapsed().as_secs_f64();
    let c = &workload.spec.cluster;
    let seeds: Vec<u64> = (0..a.seeds).map(|k| a.seed + k).collect();
    eprintln!(
        "slurm-energy: {} jobs from {} ({} rejected: larger than the cluster), cluster {} x {} {} GPUs, {} policies, seeds {:?}",
        workload.prepared.jobs.len(),
        trace_path.display(),
        workload.prepared.rejected,
        c.nodes,
        c.gpus_per_node,
        c.gpu_type,
        setups.len(),
        seeds
    );
    let (nodes, gpus_per_node, gpu_type) = (c.nodes, c.gpus_per_node, c.gpu_type.clone());
    let run_start = std::time::Instant::now();
    let mut runs = Vec::with_capacity(seeds.len());
    for (k, &seed) in seeds.iter().enumerate() {
        if k > 0 {
            workload.reseed(seed);
        }
        let label = if seeds.len() > 1 { format!(" s{seed}") } else { String::new() };
        let mut results = workload.run_all(&setups, a.threads, std::io::stderr().is_terminal(), &label);
        if with_oracle {
            results.push(workload.oracle());
        }
        runs.push(results);
    }
    let run_s = run_start.elapsed().as_secs_f64();
    let all = report::SeededRuns { seeds, runs };
    print!("{}", report::table(&all));
    if a.frontier {
        print!("{}", report::frontier_table(&all, &points));
    }
    println!("\nload {load_s:.2} s, simulate {run_s:.2} s ({} threads)", a.threads);
    if let Some(path) = a.json {
        let extra = serde_json::json!({
            "trace": trace_path.display().to_string(),
            "jobs_in_trace": workload.trace.jobs.len(),
            "jobs_in_file": jobs_in_file,
            "trace_start_unix_s": workload.trace.start_unix_s,
            "seeds": all.seeds,
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "gpu_type": gpu_type,
            "simulate_s": run_s,
        });
        let mut doc = report::json(&all, extra);
        if a.frontier {
            doc["frontier"] = report::frontier_json(&all, &points);
        }
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let first: &[tools::sim::metrics::RunResult] = all.runs.first().map_or(&[], |r| r.as_slice());
    if let Some(dir) = a.jobs_csv {
        report::write_job_csvs(first, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    if let Some(dir) = a.plots {
        let mut files = report::write_plots(first, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if a.frontier {
            files.extend(report::write_frontier_plots(&all, &points, &dir).map_err(|e| format!("{}: {e}", dir.display()))?);
        }
        for f in files {
            eprintln!("slurm-energy: wrote {}", f.display());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    // Lines of the library crates (model/, gpu-control/) at warn and above; RUST_LOG=debug etc.
    // shows more, e.g. RUST_LOG=model=debug.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(a) => simulate(a),
        Command::Demo(a) => demo(a),
        Command::Soak(a) => soak(a),
        Command::Package(a) => tools::package::cli::run(a),
        Command::Report(a) => acct_report(a),
        Command::Replay(a) => tools::replay::cli::replay(a),
        Command::Whatif(a) => whatif(a),
        Command::Workload(a) => tools::replay::cli::workload(a),
        Command::PaperSetup(a) => tools::sim::paper_setups::cli(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slurm-energy: error: {e}");
            ExitCode::from(1)
        }
    }
}

/// `hypot` and `hypotf` for the plotting code (plotters' `f32::hypot`), defined in the binary so
/// that it does not bind glibc 2.35's new versions (`hypot@GLIBC_2.35`, `hypotf@GLIBC_2.35`) and
/// loads on RHEL 9 (glibc 2.34; see `tools::package::rpm`). `hypotf` squares in f64, where no f32
/// overflows or loses a digit, and rounds once; `hypot` scales by the larger magnitude first.
#[unsafe(no_mangle)]
pub extern "C" fn hypotf(x: f32, y: f32) -> f32 {
    let (x, y) = (f64::from(x), f64::from(y));
    if x.is_infinite() || y.is_infinite() {
        return f32::INFINITY;
    }
    (x * x + y * y).sqrt() as f32
}

/// See [`hypotf`].
#[unsafe(no_mangle)]
pub extern "C" fn hypot(x: f64, y: f64) -> f64 {
    let (x, y) = (x.abs(), y.abs());
    if x.is_infinite() || y.is_infinite() {
        return f64::INFINITY;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    let (big, small) = if x >= y { (x, y) } else { (y, x) };
    if big == 0.0 {
        return 0.0;
    }
    let r = small / big;
    big * (1.0 + r * r).sqrt()
}

#[cfg(test)]
mod tests {
    #[test]
    fn hypot_and_hypotf_agree_with_the_definition() {
        // Where x*x + y*y would overflow or underflow, the values are written out.
        for (x, y, want) in [(3.0, 4.0, 5.0), (0.0, 0.0, 0.0), (-5.0, 12.0, 13.0), (1e300, 1e300, std::f64::consts::SQRT_2 * 1e300), (1e-300, 3e-300, 10f64.sqrt() * 1e-300), (0.1, 0.2, 0.223606797749979)] {
            let got = super::hypot(x, y);
            assert!((got - want).abs() <= want * 4.0 * f64::EPSILON, "hypot({x:e}, {y:e}) = {got:e}, want {want:e}");
        }
        assert_eq!(super::hypotf(3.0, 4.0), 5.0);
        assert_eq!(super::hypotf(f32::MAX, f32::MAX), f32::INFINITY, "rounds to f32 once");
        assert_eq!(super::hypot(f64::NEG_INFINITY, f64::NAN), f64::INFINITY, "C: an infinity wins over a NaN");
        assert!(super::hypot(1.0, f64::NAN).is_nan());
    }
}

//! Bodies of the fuzz targets: one function per kind of outside input, each calling the
//! project's own parsers (never a copy) and asserting what can be asserted about their answer.
//!
//! The AFL binaries in `fuzz/` call these functions; `tests/corpus_replay.rs` replays every
//! committed corpus file through them, so the corpora stay regression tests in `cargo test`.
//! A target must never panic on any input: a panic here is a panic in a daemon's plugin.

use std::collections::BTreeMap;
use std::path::Path;

/// A target: takes any bytes, panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name of its AFL binary and corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("energy_toml", energy_toml),
    ("spank_option_values", spank_option_values),
    ("plugin_args", plugin_args),
    ("gpu_freq", gpu_freq),
    ("decision_record", decision_record),
    ("clock_ledger", clock_ledger),
    ("trace_csv", trace_csv),
    ("cluster_spec", cluster_spec),
    ("carbon_csv", carbon_csv),
    ("carbon_source", carbon_source),
    ("slurm_gres", slurm_gres),
    ("slurm_strings", slurm_strings),
    ("sacct_output", sacct_output),
    ("gpu_use_report", gpu_use_report),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `energy.toml`, as sched/energy reads it at start and on `scontrol reconfigure`
/// (`sched_energy::config::parse`).
pub fn energy_toml(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Err(e) = sched_energy::config::parse(Path::new("energy.toml"), t) {
        // The message is what an admin reads; building it must not panic either.
        let _ = e.to_string();
    }
}

/// The value of one `--energy-*` option: the first byte picks the option, the rest is the value.
/// The SPANK plugin checks it at submission (`Opt::check`); sched/energy (`hints::from_spank_env`)
/// and the node side (`clocks::hints_from_values`) read it back from the job's SPANK
/// environment. A value the submit side accepted must be read back as the same hint by both.
pub fn spank_option_values(data: &[u8]) {
    use spank_energy::parse::{Bounds, Opt};
    let Some((&sel, rest)) = data.split_first() else { return };
    let Some(value) = text(rest) else { return };
    let opt = Opt::ALL[usize::from(sel) % Opt::ALL.len()];
    let bounds = Bounds::default();
    let accepted = opt.check(value, &bounds);
    if let Err(e) = &accepted {
        let _ = e.to_string();
    }
    if let Some(r) = spank_energy::parse::parse_ratio(value) {
        assert!(r.is_finite() && r >= 0.0, "parse_ratio({value:?}) = {r}");
    }
    let _ = spank_energy::parse::valid_tag(value);
    let _ = spank_energy::job_clock::parse_clock_mhz(value);

    let key_name = opt.name().replace('-', "_");
    let defaults = model::config::HintDefaults::default();
    for key in [format!("_SLURM_SPANK_OPTION_energy_{key_name}"), format!("_SLURM_SPANK_OPTION_energy_{}", key_name.trim_start_matches("energy_"))] {
        let sched = sched_energy::hints::from_spank_env([(key.as_str(), value)], &defaults);
        let values: BTreeMap<String, String> = spank_energy::clocks::StepEnv::from_entries([format!("{key}={value}").as_str()]).hint_values();
        let node = spank_energy::clocks::hints_from_values(&values, &defaults);
        assert!(sched.max_slowdown >= 1.0 && sched.max_slowdown <= defaults.max_slowdown_limit, "{sched:?}");
        assert!(sched.defer_max_s >= 0.0 && sched.defer_max_s <= defaults.max_defer_s, "{sched:?}");
        if accepted.is_ok() {
            // The node has no use for the deferral (the job has started) and leaves it at 0.
            let sched_on_node = model::types::Hints { defer_max_s: node.defer_max_s, ..sched.clone() };
            assert_eq!(sched_on_node, node, "the controller and the node read {key}={value:?} differently");
            match opt {
                Opt::Policy => assert_eq!(sched.policy.as_str(), value),
                Opt::MaxSlowdown => assert_eq!(Some(sched.max_slowdown), spank_energy::parse::parse_ratio(value)),
                Opt::Share => assert_eq!(sched.share_allowed, value == "allow"),
                Opt::Defer => assert_eq!(Some(sched.defer_max_s), spank_energy::parse::parse_duration_s(value).map(|s| s as f64)),
                Opt::Tag => assert_eq!(sched.tag.as_deref(), Some(value)),
                Opt::GpuFreq => {}
            }
        }
    }
}

/// The SPANK plugin's arguments from `plugstack.conf` (whitespace-separated, as Slurm splits
/// them): the submit side's bounds (`parse_plugin_args`) and the node side's clock settings
/// (`ClockArgs::parse`).
pub fn plugin_args(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let args: Vec<&str> = t.split_whitespace().collect();
    match spank_energy::parse::parse_plugin_args(args.iter().copied()) {
        Ok(b) => {
            assert!(b.max_slowdown.is_finite() && b.max_slowdown >= 1.0, "{b:?}");
            // What --help prints from the bounds.
            for o in spank_energy::parse::Opt::ALL {
                let _ = o.usage(&b);
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
    if let Ok(c) = spank_energy::clocks::ClockArgs::parse(args.iter().copied()) {
        for p in [Some(&c.ledger_dir), c.nvml_lib.as_ref(), c.data_dir.as_ref(), c.energy_config.as_ref()].into_iter().flatten() {
            assert!(p.is_absolute(), "{p:?}");
        }
    }
}

/// `--gpu-freq` values (`parse_gpu_freq`), a step's `tres_freq` (`parse_tres_freq`) and
/// slurm.conf's `GpuFreqDef` together (`gres_energy::clocks::step_request`). The input is up to
/// three lines: spec, tres_freq, GpuFreqDef. A parsed request must print (`Display`) as text
/// that parses back to the same request; a resolved clock must be one of the supported ones.
pub fn gpu_freq(data: &[u8]) {
    use gpu_control::gpu_freq::{FreqValue, parse_gpu_freq, parse_tres_freq, resolve_freq_mhz};
    let Some(t) = text(data) else { return };
    let mut lines = t.splitn(3, '\n');
    let spec = lines.next().unwrap_or_default();
    let tres = lines.next().unwrap_or(spec);
    let def = lines.next();
    // A request that sets nothing (`0`, `,`) prints as nothing, which is no request.
    let round_trips = |r: &gpu_control::gpu_freq::GpuFreqRequest, input: &str| {
        let shown = r.to_string();
        if !shown.is_empty() {
            assert_eq!(parse_gpu_freq(&shown).as_ref(), Ok(r), "{input:?} printed as {shown:?}");
        }
    };
    if let Ok(r) = parse_gpu_freq(spec) {
        round_trips(&r, spec);
    }
    if let Ok(Some(r)) = parse_tres_freq(tres) {
        round_trips(&r, tres);
    }
    let _ = gres_energy::clocks::step_request(tres, def);
    // Supported clocks, descending as NVML lists them: the bytes of the spec line, scaled.
    let mut supported: Vec<u32> = spec.bytes().map(|b| u32::from(b) * 10).collect();
    supported.sort_unstable_by(|a, b| b.cmp(a));
    supported.dedup();
    for v in [FreqValue::Low, FreqValue::Medium, FreqValue::High, FreqValue::HighM1, FreqValue::Mhz(spec.len() as u32 * 97)] {
        if let Some(mhz) = resolve_freq_mhz(v, &supported) {
            assert!(supported.contains(&mhz), "{v:?} resolved to {mhz} outside {supported:?}");
        }
    }
}

/// A job's admin comment as slurmctld keeps it (the decision record read back by
/// `model::decision::recorded_clock_mhz`, merged with the site's text by `merge_record`) and the
/// job clock record a node keeps for the job's steps (`spank_energy::job_clock::parse_clock_mhz`).
/// Merging a fresh record into any comment keeps it first and readable, once.
pub fn decision_record(data: &[u8]) {
    use model::decision::{merge_record, recorded_clock_mhz};
    let Some(t) = text(data) else { return };
    let _ = recorded_clock_mhz(t);
    let _ = spank_energy::job_clock::parse_clock_mhz(t);
    let clock_mhz = (t.len() as u32 % 3000) + 1;
    let record = format!("energy:policy=efficiency nodes=n1 clock={clock_mhz}MHz share=none slow=1.000");
    let merged = merge_record(Some(t), &record);
    assert!(merged.starts_with(&record), "{merged:?}");
    assert_eq!(recorded_clock_mhz(&merged), Some(clock_mhz), "{merged:?}");
    assert_eq!(merge_record(Some(&merged), &record), merged, "merging twice changed {t:?}");
}

/// The clock ledger file of slurmd's GPU clock arbiter (`gpu_control::arbiter::Ledger::parse`):
/// what parses must be written back (`to_text`) as text that parses to the same ledger.
pub fn clock_ledger(data: &[u8]) {
    use gpu_control::arbiter::Ledger;
    let Some(t) = text(data) else { return };
    let Ok(ledger) = Ledger::parse(t) else { return };
    let written = ledger.to_text();
    assert_eq!(Ledger::parse(&written).as_ref(), Ok(&ledger), "{written}");
    for g in &ledger.gpus {
        let _ = ledger.effective_clocks_mhz(&g.uuid);
    }
}

/// A job trace for the simulator (`tools::trace::parse_trace`, Philly or generic CSV).
pub fn trace_csv(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let max_jobs = data.first().map(|&b| usize::from(b % 8));
    let Ok(trace) = tools::trace::parse_trace(t, Path::new("trace.csv"), max_jobs.filter(|&n| n > 0)) else { return };
    assert!(trace.jobs.windows(2).all(|w| w[0].submit_time_s <= w[1].submit_time_s), "jobs not sorted by submit time");
    for j in &trace.jobs {
        assert!(j.submit_time_s >= 0.0 && j.duration_s > 0.0 && j.num_gpus > 0, "{j:?}");
    }
}

/// The simulator's cluster description (`tools::sim::spec::ClusterSpec::parse`, TOML).
pub fn cluster_spec(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let _ = tools::sim::spec::ClusterSpec::parse(t, Path::new("cluster.toml"));
}

/// A grid carbon-intensity file (`model::data::carbon::parse_carbon`, `Time,Carbon Intensity`).
pub fn carbon_csv(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let Ok(c) = model::data::carbon::parse_carbon(Path::new("carbon.csv"), t) else { return };
    assert!(c.step_s > 0.0 && !c.g_per_kwh.is_empty(), "{c:?}");
    assert!(c.g_per_kwh.iter().all(|v| v.is_finite() && *v >= 0.0), "{c:?}");
    let _ = c.at_offset(c.step_s * 1.5);
    let _ = c.at_unix_s(c.start_unix_s - 1);
}

/// A site's carbon-intensity source file in every format (`model::carbon_source`): CSV or a
/// saved grid-service JSON response, as sched/energy and `slurm-energy report` read it.
pub fn carbon_source(data: &[u8]) {
    use model::carbon_source::{IntensitySeries, SourceFormat};
    let Some(t) = text(data) else { return };
    for format in [SourceFormat::Auto, SourceFormat::Csv, SourceFormat::NationalGridUk, SourceFormat::ElectricityMaps, SourceFormat::WattTime] {
        match IntensitySeries::parse(Path::new("intensity"), t, format) {
            Ok(s) => {
                let (a, b) = s.span_unix_s().expect("a parsed series is not empty");
                assert!(a < b, "{s:?}");
                assert!(s.intervals().iter().all(|i| i.g_per_kwh.is_finite() && i.g_per_kwh >= 0.0), "{s:?}");
                assert!(s.intervals().windows(2).all(|w| w[0].end_unix_s <= w[1].start_unix_s), "{s:?}");
                let _ = s.job_carbon_g(a, b, 3.6e6);
                let _ = s.to_trace(s.step_s());
                let _ = model::carbon::CarbonSignal::published(s).relative_intensity(a as f64);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// GRES strings from Slurm's node and job records (`Gres=`, `tres_per_node`, ...;
/// `slurm_bindings::gres`) and the user's `--gres` as cli_filter/energy reads it.
pub fn slurm_gres(data: &[u8]) {
    use slurm_bindings::gres;
    let Some(t) = text(data) else { return };
    let entries = gres::parse(t);
    for e in &entries {
        assert!(!e.name.is_empty() && !e.name.contains(',') && !e.name.contains(':'), "{e:?}");
    }
    let total: u64 = entries.iter().filter(|e| e.name == "gpu").map(|e| e.count).fold(0, u64::saturating_add);
    assert_eq!(gres::count(t, "gpu"), total);
    if let Some(ty) = gres::first_type(t, "gpu") {
        assert!(!ty.is_empty() && !ty.contains(':'), "{ty:?}");
    }
    let _ = cli_filter_energy::requests_shard(t);
}

/// Other strings the plugins take from Slurm: the first byte picks which.
/// - a step's environment (`SLURM_JOB_GPUS`, `SLURM_STEP_GPUS`, SPANK options; one `KEY=VALUE`
///   a line) as the SPANK plugin reads it (`StepEnv`), and the job record's SPANK environment
///   as sched/energy reads it (`hints::from_spank_env`, `hints::explicit_share`);
/// - a slurmstepd process title (`StepId::from_title`) and its `job.step` (`parse_step_ids`);
/// - slurm.conf's `SchedulerParameters` (`slurm_bindings::conf`);
/// - a step's GPU bitmap, as the GPU plugins map its set bits to NVML devices, and Slurm's
///   readings of autodetected records (`gpu_bitmap`).
pub fn slurm_strings(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else { return };
    let Some(t) = text(rest) else { return };
    if sel % 4 == 3 {
        return gpu_bitmap(rest);
    }
    match sel % 3 {
        0 => {
            let env = spank_energy::clocks::StepEnv::from_entries(t.lines());
            for step_id in [0, 1, 0xffff_fffb] {
                let gpus = env.gpus(step_id);
                let mut sorted = gpus.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), gpus.len(), "a GPU listed twice: {gpus:?}");
            }
            let _ = env.explicit_gpu_freq();
            let defaults = model::config::HintDefaults::default();
            let _ = spank_energy::clocks::hints_from_values(&env.hint_values(), &defaults);
            // The same entries as sched/energy gets them from the job record's spank_job_env.
            let entries: Vec<(&str, &str)> = t.lines().filter_map(|l| l.split_once('=')).collect();
            let h = sched_energy::hints::from_spank_env(entries.iter().copied(), &defaults);
            assert!(h.max_slowdown >= 1.0 && h.max_slowdown <= defaults.max_slowdown_limit, "{h:?}");
            assert!(h.defer_max_s >= 0.0 && h.defer_max_s <= defaults.max_defer_s, "{h:?}");
            let _ = sched_energy::hints::explicit_share(entries.iter().copied());
        }
        1 => {
            if let Some(id) = gres_energy::StepId::from_title(t) {
                assert!(id.0.contains('.') && !id.0.contains(']'), "{id:?}");
                let _ = gres_energy::clocks::parse_step_ids(&id.0);
            }
            let _ = gres_energy::clocks::parse_step_ids(t);
        }
        _ => {
            use slurm_bindings::conf;
            let params = Some(t);
            let _ = conf::YieldParams::parse(params);
            let _ = conf::main_scheduler_disabled(params);
            if let Some(problem) = conf::sched_params_problem(params) {
                // The line it proposes must itself be accepted.
                let line = problem.rsplit_once("SchedulerParameters=").map(|(_, l)| l).unwrap_or_default();
                if !line.contains(char::is_whitespace) {
                    assert_eq!(conf::sched_params_problem(Some(line)), None, "{t:?} -> {line:?}");
                }
            }
        }
    }
}

/// The set bits of a step's GPU bitmap (Slurm's `bit_*` functions read the bitmap; the first byte
/// gives the node's GPU count, the next that many bytes their minor numbers, the rest the bits)
/// mapped to NVML devices as both GPU plugins do (`gres_energy::devmap::DeviceMap`), and the
/// same GPUs as autodetected records put in Slurm's order (the GPU plugin's map on 24.11).
fn gpu_bitmap(data: &[u8]) {
    use gpu_control::devmap::{links_self_position, natural_cmp, slurm_autodetect_order};
    use gres_energy::devmap::{AutodetectedGpu, DeviceMap};
    let Some((&count, rest)) = data.split_first() else { return };
    let (minors, bits) = rest.split_at(usize::from(count).min(rest.len()));
    let minors: Vec<u32> = minors.iter().map(|&m| u32::from(m)).collect();
    let map = DeviceMap::from_minors(&minors);
    assert_eq!(map.len(), minors.len());
    let indices: Vec<usize> = bits.iter().enumerate().flat_map(|(byte, &b)| (0..8).filter(move |k| b & (1 << k) != 0).map(move |k| byte * 8 + k)).collect();
    let (found, unknown) = map.nvml_indices(&indices);
    assert_eq!(found.len() + unknown.len(), indices.len());
    assert!(found.iter().all(|&n| (n as usize) < map.len()), "{found:?}");
    let mut distinct = found.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), found.len(), "two Slurm GPUs on one NVML device: {found:?}");

    // The same GPUs as autodetection hands them to Slurm on 24.11, put in Slurm's order; each
    // links string has its -1 where the minor number says (so positions may repeat, and then
    // the order is not exact).
    let n = minors.len();
    let records: Vec<AutodetectedGpu> = minors
        .iter()
        .map(|&m| AutodetectedGpu {
            file: Some(format!("/dev/nvidia{m}")),
            links: Some((0..n).map(|k| if k == m as usize % n { "-1" } else { "0" }).collect::<Vec<_>>().join(",")),
        })
        .collect();
    let (order, _) = slurm_autodetect_order(&records);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "not a permutation: {order:?}");
    let by_nvml: Vec<Option<u32>> = minors.iter().map(|&m| Some(m)).collect();
    let auto = DeviceMap::from_autodetected(&records, &by_nvml);
    assert_eq!(auto.len(), n);
    let (found, _) = auto.nvml_indices(&(0..n).collect::<Vec<_>>());
    let mut distinct = found.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), found.len(), "two Slurm GPUs on one NVML device: {found:?}");
    // Slurm's readings of raw text: never a panic, a position inside the string or -2, and a
    // natural order that is antisymmetric.
    if let Ok(t) = std::str::from_utf8(rest) {
        let pos = links_self_position(t);
        assert!(pos == -2 || (0..=t.len() as i64).contains(&pos), "{t:?} -> {pos}");
        if t.is_char_boundary(t.len() / 2) {
            let (a, b) = t.split_at(t.len() / 2);
            assert_eq!(natural_cmp(a, b), natural_cmp(b, a).reverse(), "{a:?} {b:?}");
        }
    }
}

/// `sacct --parsable2` output as `slurm-energy report` reads it (`tools::acct_report::sacct`),
/// then the whole report built and rendered from it: sums match the parsed jobs, and every
/// record is either a job or counted as skipped. Then the same bytes as hostile job names
/// ([`sacct_job_names`]).
pub fn sacct_output(data: &[u8]) {
    use tools::acct_report::{aggregate, html, text};
    let t = String::from_utf8_lossy(data);
    let read = tools::acct_report::sacct::parse(&t, "sacct");
    let inputs = aggregate::Inputs { window: Default::default(), source: "fuzz".into(), carbon: None, saving: None };
    let mut report = aggregate::build(&read.jobs, &inputs);
    report.skipped = aggregate::Skipped::of(&read);
    let jobs = &read.jobs;
    let started: Vec<_> = jobs.iter().filter(|j| j.start_unix_s.is_some()).collect();
    assert_eq!(report.totals.jobs, started.len());
    let known: f64 = started.iter().filter_map(|j| j.energy_j).sum();
    assert!((report.totals.energy_j - known).abs() <= 1e-9 * known.abs().max(1.0), "{} vs {known}", report.totals.energy_j);
    assert_eq!(report.totals.jobs_without_energy, started.iter().filter(|j| j.energy_j.is_none()).count());
    assert_eq!(report.skipped.records, read.skipped.len());
    let rendered = text::render(&report);
    assert!(!rendered.chars().any(|c| c.is_control() && c != '\n'), "a control character reaches the terminal");
    let _ = html::render(&report);
    let _ = tools::acct_report::to_json(&report);
    sacct_job_names(&t);
}

/// The report's delimiter in the fuzz runs: fixed (the real one is drawn per run, unknown to
/// users), so inputs that hold it are left out.
const FUZZ_SACCT_DELIMITER: &str = "|5f3c0e9a41b27d86c0ffee1234abcd98";

/// The input, split at NUL bytes, as the job names (and the last piece also as an
/// AdminComment) of sacct output printed as sacct prints it for the report's command
/// (`--parsable2 --delimiter`, header first, fields raw): every record is read back whole, and
/// no name changes any other field of any record.
fn sacct_job_names(t: &str) {
    use tools::acct_report::sacct::{self, Delimiter};
    if t.contains(FUZZ_SACCT_DELIMITER) {
        return;
    }
    let Some(d) = Delimiter::new(FUZZ_SACCT_DELIMITER) else { return };
    let pieces: Vec<&str> = t.split('\0').take(8).collect();
    let comment = pieces.last().copied().unwrap_or("");
    let rows: Vec<Vec<String>> = pieces
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let id = (100 + k).to_string();
            let comment = if k + 1 == pieces.len() { format!("energy:policy=balanced clock=1200MHz; {comment}") } else { "energy:policy=efficiency clock=900MHz".into() };
            vec![
                id.clone(),
                id,
                name.to_string(),
                format!("user{k}"),
                format!("acct{k}"),
                "gpu".into(),
                "COMPLETED".into(),
                (1_700_000_000 + k).to_string(),
                (1_700_000_060 + k).to_string(),
                "60".into(),
                format!("gres/gpu={}", k + 1),
                (1000 * (k + 1)).to_string(),
                format!("n{k}"),
                comment,
            ]
        })
        .collect();
    let mut out = sacct::header_line(&d);
    out.push('\n');
    for row in &rows {
        out.push_str(&row.join(d.as_str()));
        out.push('\n');
    }
    let read = sacct::parse_output(&out, "sacct", &d).unwrap_or_else(|e| panic!("the header is refused: {e}"));
    assert!(read.skipped.is_empty(), "records skipped: {:?}", read.skipped);
    assert_eq!(read.jobs.len(), rows.len(), "records gained or lost: {:?}", read.jobs);
    for (k, (job, row)) in read.jobs.iter().zip(&rows).enumerate() {
        let got = [&job.job_id_raw, &job.job_id, &job.name, &job.user, &job.account, &job.partition, &job.state];
        let want = [&row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6]];
        assert_eq!(got, want, "record {k}: a job name moved a field");
        assert_eq!((job.start_unix_s, job.end_unix_s, job.elapsed_s), (Some(1_700_000_000 + k as i64), Some(1_700_000_060 + k as i64), 60));
        assert_eq!((job.gpus, job.energy_j, job.node_list.as_str()), (k as u32 + 1, Some(1000.0 * (k + 1) as f64), row[12].as_str()));
        assert_eq!(job.admin_comment, row[13].trim(), "record {k}: the AdminComment changed");
    }
    // The same output as a captured file (its header gives the delimiter) reads the same.
    assert_eq!(sacct::parse(&out, "file"), read);
}

/// A GPU-use report as slurmctld's listener takes it out of a munge credential
/// (`model::gpu_use::UseReport::parse`, called from `gpu_use_listener`): what it accepts is a
/// real interval of a real job on a named node, and it reads back its own wire form.
pub fn gpu_use_report(data: &[u8]) {
    use model::gpu_use::UseReport;
    let Some(t) = text(data) else { return };
    let r = match UseReport::parse(t) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(!r.node.is_empty() && !r.node.chars().any(char::is_whitespace), "node {:?}", r.node);
    assert!(r.from_unix_s.is_finite() && r.to_unix_s.is_finite() && r.to_unix_s > r.from_unix_s, "{r:?}");
    assert!(r.gpus > 0 && (0.0..=100.0).contains(&r.util_pct), "{r:?}");
    let wire = r.to_wire();
    // The wire form keeps milliseconds: an interval shorter than that cannot travel.
    let (from_ms, to_ms) = (format!("{:.3}", r.from_unix_s), format!("{:.3}", r.to_unix_s));
    if from_ms.parse::<f64>().ok() < to_ms.parse::<f64>().ok() {
        let back = UseReport::parse(&wire).unwrap_or_else(|e| panic!("{wire:?} from {t:?}: {e}"));
        assert_eq!((back.job_id, back.node.as_str(), back.gpus), (r.job_id, r.node.as_str(), r.gpus), "{wire:?}");
        assert!((back.util_pct - r.util_pct).abs() <= 0.005 + 1e-9 * r.util_pct.abs(), "{wire:?}");
    }
}

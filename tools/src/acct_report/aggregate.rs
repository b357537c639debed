//! From job allocations to the report's numbers: per-job figures (energy, carbon and where it
//! came from, GPU-hours, clock, estimated saving) and their sums per user, account, partition,
//! tag and clock; top jobs; decision-record statistics.
//!
//! Energy is what `sacct` gives as `ConsumedEnergyRaw` for each allocation that overlaps the
//! window, counted whole (not clipped to the window), so the total equals the sum of sacct's
//! ConsumedEnergy over the same `sacct` query. Unknown energies are not counted as zero: they
//! add nothing to the sums and are counted in `jobs_without_energy`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::carbon::CarbonIntensity;
use super::record::RecordFields;
use super::sacct::{SacctJob, SacctRead};
use super::saving::SavingModel;
use super::window::Window;

/// How many jobs the "top jobs" list keeps.
pub const TOP_JOBS: usize = 10;
/// The name of the group of jobs without a tag, and the clock group of jobs without a record.
pub const UNTAGGED: &str = "(untagged)";

/// The group of jobs with an empty user, account or partition field.
pub const NO_NAME: &str = "(none)";

/// Where a job's carbon figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CarbonSource {
    /// `carbon_g=` in the decision record (the plugin's time-resolved figure).
    Record,
    /// The `--carbon` intensity file over the job's run.
    IntensityFile,
    /// Neither: unknown.
    None,
}

impl CarbonSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CarbonSource::Record => "record",
            CarbonSource::IntensityFile => "intensity file",
            CarbonSource::None => "-",
        }
    }
}

/// One job of the report.
#[derive(Debug, Clone, Serialize)]
pub struct JobFigures {
    pub job_id: String,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub tag: Option<String>,
    pub state: String,
    pub running: bool,
    pub array_task: bool,
    pub start_unix_s: Option<i64>,
    pub end_unix_s: Option<i64>,
    pub elapsed_s: u64,
    pub gpus: u32,
    pub gpu_hours: f64,
    pub energy_j: Option<f64>,
    pub carbon_g: Option<f64>,
    pub carbon_source: CarbonSource,
    pub policy: Option<String>,
    pub clock_mhz: Option<u32>,
    pub predicted_energy_j: Option<f64>,
    pub default_clock_energy_j: Option<f64>,
    pub energy_saved_j: Option<f64>,
}

/// Sums over a group of jobs (a user, an account, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupTotals {
    pub name: String,
    pub jobs: usize,
    pub energy_j: f64,
    pub jobs_without_energy: usize,
    /// Sum over the jobs whose carbon is known; `None` when no job's is.
    pub carbon_g: Option<f64>,
    pub jobs_without_carbon: usize,
    pub gpu_hours: f64,
    pub energy_saved_j: f64,
}

impl GroupTotals {
    fn add(&mut self, j: &JobFigures) {
        self.jobs += 1;
        match j.energy_j {
            Some(e) => self.energy_j += e,
            None => self.jobs_without_energy += 1,
        }
        match j.carbon_g {
            Some(c) => self.carbon_g = Some(self.carbon_g.unwrap_or(0.0) + c),
            None => self.jobs_without_carbon += 1,
        }
        self.gpu_hours += j.gpu_hours;
        self.energy_saved_j += j.energy_saved_j.unwrap_or(0.0);
    }
}

/// GPU-hours run at one clock (`None`: jobs without a decision record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClockHours {
    pub clock_mhz: Option<u32>,
    pub jobs: usize,
    pub gpu_hours: f64,
    pub energy_j: f64,
}

/// What the decision records say over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DecisionStats {
    pub jobs_with_record: usize,
    pub jobs_without_record: usize,
    pub jobs_per_policy: BTreeMap<String, usize>,
    pub jobs_shared: usize,
    pub jobs_below_default_clock: usize,
    pub mean_predicted_slowdown: Option<f64>,
    /// Sum of measured / sum of predicted energy over jobs with both (1 = predictions exact).
    pub measured_over_predicted_energy: Option<f64>,
    pub jobs_with_saving_estimate: usize,
}

/// The whole report (also its JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub window: Window,
    /// Where the records came from (`sacct` or the file read).
    pub source: String,
    /// The GPU model whose curves estimate savings, if any.
    pub saving_model: Option<String>,
    pub totals: GroupTotals,
    pub running_jobs: usize,
    pub array_tasks: usize,
    pub users: Vec<GroupTotals>,
    pub accounts: Vec<GroupTotals>,
    pub partitions: Vec<GroupTotals>,
    pub tags: Vec<GroupTotals>,
    pub gpu_hours_by_clock: Vec<ClockHours>,
    pub top_jobs: Vec<JobFigures>,
    pub decisions: DecisionStats,
    pub jobs: Vec<JobFigures>,
    /// sacct records that could not be read (in no figure above).
    pub skipped: Skipped,
}

/// The sacct records left out because they could not be read: counted and shown, never the end
/// of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Skipped {
    pub records: usize,
    /// The first [`super::sacct::MAX_SKIPPED_LISTED`], as `source:line: reason`.
    pub first: Vec<String>,
    /// The input had no header line and was read with `|`: a job name holding `|` or a newline
    /// may have shifted its job's fields (a capture made the old way).
    pub legacy_delimiter: bool,
}

impl Skipped {
    pub fn of(read: &SacctRead) -> Skipped {
        Skipped {
            records: read.skipped.len(),
            first: read.skipped.iter().take(super::sacct::MAX_SKIPPED_LISTED).map(ToString::to_string).collect(),
            legacy_delimiter: read.legacy_delimiter,
        }
    }
}

/// Everything the figures need beyond the records.
pub struct Inputs<'a> {
    pub window: Window,
    pub source: String,
    pub carbon: Option<&'a dyn CarbonIntensity>,
    pub saving: Option<&'a SavingModel>,
}

pub fn build(records: &[SacctJob], inputs: &Inputs<'_>) -> Report {
    let jobs: Vec<JobFigures> = records
        .iter()
        .filter(|r| r.start_unix_s.is_some())
        .map(|r| figures(r, inputs))
        .collect();
    let mut totals = GroupTotals { name: "total".into(), ..GroupTotals::default() };
    for j in &jobs {
        totals.add(j);
    }
    let group = |key: &dyn Fn(&JobFigures) -> String| -> Vec<GroupTotals> {
        let mut groups: BTreeMap<String, GroupTotals> = BTreeMap::new();
        for j in &jobs {
            let name = Some(key(j)).filter(|n| !n.is_empty()).unwrap_or_else(|| NO_NAME.into());
            groups.entry(name.clone()).or_insert_with(|| GroupTotals { name, ..GroupTotals::default() }).add(j);
        }
        let mut list: Vec<GroupTotals> = groups.into_values().collect();
        list.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j).then_with(|| a.name.cmp(&b.name)));
        list
    };
    let mut by_clock: BTreeMap<Option<u32>, ClockHours> = BTreeMap::new();
    for j in &jobs {
        let c = by_clock.entry(j.clock_mhz).or_insert(ClockHours { clock_mhz: j.clock_mhz, jobs: 0, gpu_hours: 0.0, energy_j: 0.0 });
        c.jobs += 1;
        c.gpu_hours += j.gpu_hours;
        c.energy_j += j.energy_j.unwrap_or(0.0);
    }
    let mut top: Vec<JobFigures> = jobs.iter().filter(|j| j.energy_j.is_some()).cloned().collect();
    top.sort_by(|a, b| b.energy_j.unwrap_or(0.0).total_cmp(&a.energy_j.unwrap_or(0.0)));
    top.truncate(TOP_JOBS);
    Report {
        window: inputs.window.clone(),
        source: inputs.source.clone(),
        saving_model: inputs.saving.map(|s| s.gpu_model.clone()),
        running_jobs: jobs.iter().filter(|j| j.running).count(),
        array_tasks: jobs.iter().filter(|j| j.array_task).count(),
        users: group(&|j| j.user.clone()),
        accounts: group(&|j| j.account.clone()),
        partitions: group(&|j| j.partition.clone()),
        tags: group(&|j| j.tag.clone().unwrap_or_else(|| UNTAGGED.into())),
        gpu_hours_by_clock: by_clock.into_values().collect(),
        top_jobs: top,
        decisions: decision_stats(records, &jobs),
        totals,
        jobs,
        skipped: Skipped::default(),
    }
}

fn figures(r: &SacctJob, inputs: &Inputs<'_>) -> JobFigures {
    let rec = RecordFields::read(&r.admin_comment);
    let (carbon_g, carbon_source) = match (rec.carbon_g, inputs.carbon, r.start_unix_s, r.end_unix_s, r.energy_j) {
        (Some(g), ..) => (Some(g), CarbonSource::Record),
        (None, Some(c), Some(start), Some(end), Some(e)) => match c.job_carbon_g(start, end, e) {
            Some(g) => (Some(g), CarbonSource::IntensityFile),
            None => (None, CarbonSource::None),
        },
        _ => (None, CarbonSource::None),
    };
    let default_clock_energy_j = match (inputs.saving, r.energy_j, rec.predicted_slowdown) {
        (Some(model), Some(e), Some(slow)) => model.default_clock_energy_j(e, slow),
        _ => None,
    };
    JobFigures {
        job_id: r.job_id.clone(),
        name: r.name.clone(),
        user: r.user.clone(),
        account: r.account.clone(),
        partition: r.partition.clone(),
        tag: rec.tag.clone(),
        state: r.state.clone(),
        running: r.is_running(),
        array_task: r.is_array_task(),
        start_unix_s: r.start_unix_s,
        end_unix_s: r.end_unix_s,
        elapsed_s: r.elapsed_s,
        gpus: r.gpus,
        gpu_hours: f64::from(r.gpus) * r.elapsed_s as f64 / 3_600.0,
        energy_j: r.energy_j,
        carbon_g,
        carbon_source,
        policy: rec.policy.clone(),
        clock_mhz: rec.clock_mhz,
        predicted_energy_j: rec.predicted_energy_j,
        default_clock_energy_j,
        energy_saved_j: default_clock_energy_j.zip(r.energy_j).map(|(d, e)| d - e),
    }
}

fn decision_stats(records: &[SacctJob], jobs: &[JobFigures]) -> DecisionStats {
    let mut s = DecisionStats::default();
    let (mut slow_sum, mut slow_n) = (0.0, 0usize);
    let (mut measured, mut predicted) = (0.0, 0.0);
    for r in records.iter().filter(|r| r.start_unix_s.is_some()) {
        let rec = RecordFields::read(&r.admin_comment);
        if !rec.is_record() {
            s.jobs_without_record += 1;
            continue;
        }
        s.jobs_with_record += 1;
        if let Some(p) = &rec.policy {
            *s.jobs_per_policy.entry(p.clone()).or_default() += 1;
        }
        s.jobs_shared += usize::from(rec.shared);
        if let Some(slow) = rec.predicted_slowdown {
            slow_sum += slow;
            slow_n += 1;
            s.jobs_below_default_clock += usize::from(slow > 1.0 + 1e-9);
        }
        match (r.energy_j, rec.predicted_energy_j, r.is_running()) {
            (Some(m), Some(p), false) if p > 0.0 => {
                measured += m;
                predicted += p;
            }
            _ => {}
        }
    }
    s.mean_predicted_slowdown = (slow_n > 0).then(|| slow_sum / slow_n as f64);
    s.measured_over_predicted_energy = (predicted > 0.0).then(|| measured / predicted);
    s.jobs_with_saving_estimate = jobs.iter().filter(|j| j.energy_saved_j.is_some()).count();
    s
}

//! `slurm-energy report` on sacct output recorded from the demo cluster (sched/energy,
//! gpu_nvml and acct_gather_energy/nvml over the fake NVML; 10 demo jobs, a 3-task array, a
//! CPU-only job and a job still running when captured): fixtures/sacct_demo_running.txt, made
//! with `SLURM_TIME_FORMAT=%s sacct --parsable2 --noheader -a -X --format=<sacct::format_arg()>`
//! (the old capture, `|` without a header line, which the report still reads).

use std::path::{Path, PathBuf};

use tools::acct_report::aggregate::{self, CarbonSource, Inputs};
use tools::acct_report::sacct::{self, FIELDS};
use tools::acct_report::saving::SavingModel;
use tools::acct_report::window::Window;
use tools::acct_report::{carbon, html, text, to_json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Sum of the ConsumedEnergyRaw column, read straight from the file (not through the parser).
fn energy_column_sum(path: &Path) -> f64 {
    let col = FIELDS.iter().position(|f| *f == "ConsumedEnergyRaw").expect("field");
    std::fs::read_to_string(path)
        .expect("fixture")
        .lines()
        .filter_map(|l| l.split('|').nth(col)?.parse::<f64>().ok())
        .sum()
}

fn inputs<'a>(carbon: Option<&'a dyn carbon::CarbonIntensity>, saving: Option<&'a SavingModel>) -> Inputs<'a> {
    Inputs { window: Window::default(), source: "fixture".into(), carbon, saving }
}

#[test]
fn recorded_output_gives_the_sacct_energy_total_and_counts_running_and_array_jobs() {
    let path = fixture("sacct_demo_running.txt");
    let jobs = sacct::read_file(&path).expect("the fixture parses").jobs;
    let report = aggregate::build(&jobs, &inputs(None, None));
    let want = energy_column_sum(&path);
    assert!(want > 10_000.0, "the fixture has GPU energy: {want} J");
    assert!((report.totals.energy_j - want).abs() <= want * 0.01, "total {} vs sacct {want}", report.totals.energy_j);
    let user_sum: f64 = report.users.iter().map(|u| u.energy_j).sum();
    assert!((user_sum - report.totals.energy_j).abs() < 1e-6);
    assert_eq!(report.running_jobs, 1);
    assert_eq!(report.array_tasks, 3);
    // The running job has no energy yet: unknown, not zero.
    assert_eq!(report.totals.jobs_without_energy, 1);
    let running = report.jobs.iter().find(|j| j.running).expect("running job");
    assert_eq!(running.energy_j, None);
    // The CPU-only job measured 0 J: known.
    let cpu = report.jobs.iter().find(|j| j.name == "cpuonly").expect("cpu job");
    assert_eq!((cpu.energy_j, cpu.gpus), (Some(0.0), 0));
    // GPU-hours by clock add up to the total.
    let by_clock: f64 = report.gpu_hours_by_clock.iter().map(|c| c.gpu_hours).sum();
    assert!((by_clock - report.totals.gpu_hours).abs() < 1e-9);
    assert!(report.gpu_hours_by_clock.iter().any(|c| c.clock_mhz == Some(903)), "array tasks ran at 903 MHz");
    // Top jobs are in decreasing energy.
    assert!(report.top_jobs.windows(2).all(|w| w[0].energy_j >= w[1].energy_j));
    assert_eq!(report.top_jobs.first().map(|j| j.name.as_str()), Some("train-bert"));
    // Decision records: every started job but the running one has one.
    assert_eq!(report.decisions.jobs_without_record, 1);
    assert_eq!(report.decisions.jobs_with_record, report.jobs.len() - 1);
    assert_eq!(report.decisions.jobs_per_policy.values().sum::<usize>(), report.decisions.jobs_with_record);
    // No carbon source: unknown everywhere, not 0 g.
    assert_eq!(report.totals.carbon_g, None);
    assert!(report.jobs.iter().all(|j| j.carbon_source == CarbonSource::None));
}

#[test]
fn a_corrupt_row_is_skipped_and_shown_naming_file_and_line() {
    let path = fixture("sacct_corrupt_row.txt");
    let read = sacct::read_file(&path).expect("the file is read");
    assert_eq!(read.skipped.len(), 1, "row 5 has ConsumedEnergyRaw 12x4: {:?}", read.skipped);
    let e = &read.skipped[0];
    assert_eq!(e.line, 5, "{e}");
    assert!(e.reason.contains("ConsumedEnergyRaw"), "{e}");
    assert!(e.to_string().starts_with(&format!("{}:5: ", path.display())), "{e}");
    let lines = std::fs::read_to_string(&path).expect("fixture").lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(read.jobs.len(), lines - 1, "every other row is read");
    let mut report = aggregate::build(&read.jobs, &inputs(None, None));
    report.skipped = aggregate::Skipped::of(&read);
    assert!(text::render(&report).contains("Skipped 1 sacct records"));
    assert!(html::render(&report).contains("Skipped 1 sacct records"));
    let json: serde_json::Value = serde_json::from_str(&to_json(&report).expect("json")).expect("valid JSON");
    assert_eq!(json["skipped"]["records"].as_u64(), Some(1));
    assert!(json["skipped"]["first"][0].as_str().is_some_and(|s| s.contains("ConsumedEnergyRaw")));
}

#[test]
fn carbon_comes_from_the_intensity_file_when_records_have_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("ci.csv");
    // A flat 250 g/kWh over the day of the fixture (2026-11-25, UTC).
    let mut text = String::from("Time,Carbon Intensity\n");
    for h in 0..24 {
        text.push_str(&format!("2026-11-25 {h:02}:00:00,250\n"));
    }
    std::fs::write(&csv, text).expect("write");
    let intensity = carbon::load(&csv).expect("intensity file");
    let jobs = sacct::read_file(&fixture("sacct_demo_running.txt")).expect("parses").jobs;
    let report = aggregate::build(&jobs, &inputs(Some(intensity.as_ref()), None));
    for j in &report.jobs {
        match (j.energy_j, j.end_unix_s) {
            (Some(e), Some(_)) => {
                assert_eq!(j.carbon_source, CarbonSource::IntensityFile, "job {}", j.job_id);
                let want = e / 3.6e6 * 250.0;
                assert!((j.carbon_g.unwrap_or(-1.0) - want).abs() < 1e-9, "job {}: {:?} vs {want}", j.job_id, j.carbon_g);
            }
            _ => assert_eq!(j.carbon_source, CarbonSource::None, "job {}", j.job_id),
        }
    }
    let user = &report.users[0];
    let want: f64 = report.jobs.iter().filter_map(|j| j.carbon_g).sum();
    assert!((user.carbon_g.unwrap_or(-1.0) - want).abs() < 1e-9);
    assert_eq!(user.jobs_without_carbon, 1, "the running job");
    // A record's own figure wins over the file.
    let with_record = jobs[0].admin_comment.clone() + " carbon_g=7.5";
    let mut jobs2 = jobs.clone();
    jobs2[0].admin_comment = with_record;
    let r2 = aggregate::build(&jobs2, &inputs(Some(intensity.as_ref()), None));
    assert_eq!((r2.jobs[0].carbon_g, r2.jobs[0].carbon_source), (Some(7.5), CarbonSource::Record));
}

#[test]
fn savings_are_zero_at_the_default_clock_and_positive_below_it() {
    let data = std::env::var_os("SLURM_ENERGY_DATA")
        .map_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")), PathBuf::from);
    let model = SavingModel::load(&data, "v100").expect("v100 curves from the measured data");
    let jobs = sacct::read_file(&fixture("sacct_demo_running.txt")).expect("parses").jobs;
    let report = aggregate::build(&jobs, &inputs(None, Some(&model)));
    let default_clock = report.jobs.iter().filter_map(|j| j.clock_mhz).max().expect("clocks");
    for j in report.jobs.iter().filter(|j| j.energy_j.unwrap_or(0.0) > 0.0 && j.clock_mhz.is_some()) {
        let saved = j.energy_saved_j.unwrap_or_else(|| panic!("job {} has no estimate", j.job_id));
        if j.clock_mhz == Some(default_clock) {
            assert!(saved.abs() < 1e-9, "job {} at the default clock saved {saved}", j.job_id);
        } else {
            assert!(saved > 0.0, "job {} at {:?} MHz saved {saved}", j.job_id, j.clock_mhz);
        }
    }
    let sum: f64 = report.jobs.iter().filter_map(|j| j.energy_saved_j).sum();
    assert!((report.totals.energy_saved_j - sum).abs() < 1e-6);
}

#[test]
fn outputs_carry_the_same_figures_and_the_page_is_self_contained() {
    let jobs = sacct::read_file(&fixture("sacct_demo_running.txt")).expect("parses").jobs;
    let report = aggregate::build(&jobs, &inputs(None, None));
    let json: serde_json::Value = serde_json::from_str(&to_json(&report).expect("json")).expect("valid JSON");
    assert_eq!(json["totals"]["energy_j"].as_f64(), Some(report.totals.energy_j));
    let users = json["users"].as_array().expect("users");
    assert!(!users.is_empty() && users.iter().all(|u| u.get("energy_j").is_some() && u.get("carbon_g").is_some()));

    let table = text::render(&report);
    assert!(table.contains("Per user") && table.contains("train-bert") && table.contains("(running)"), "{table}");

    let page = html::render(&report);
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    assert_eq!(page.matches("<svg").count(), 6, "six plots");
    for remote in ["<script", "src=", "href=", "url(", "@import"] {
        assert!(!page.contains(remote), "the page must not load anything: {remote}");
    }
    assert!(page.contains("Energy per user") && page.contains("GPU-hours by clock") && page.contains("Top jobs by energy"));
}

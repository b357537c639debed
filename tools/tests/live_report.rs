//! `slurm-energy report` against a real cluster's records: the demo cluster (sched/energy,
//! spank_energy, gpu_nvml and acct_gather_energy/nvml over the fake NVML, slurmdbd) runs jobs
//! with different hints, a 2-task array and a job of a second user; then the report's JSON
//! total must equal the sum of `sacct`'s ConsumedEnergyRaw for the same window within 1 %,
//! every user must have an entry with energy_j and carbon_g (carbon from an intensity file),
//! and the HTML page must render in headless chromium to a non-trivial picture.
//!
//! Skipped (with a printed reason) when not root, Slurm is missing or chromium cannot be
//! installed; under `CI=true` each of these fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use slurm_testcluster::{LocalCluster, skip_for, skip_live_test};
use tools::demo::{DemoCluster, DemoJob, DemoSetup, FakeGpuSite, PluginFiles, build_plugins, default_project_dir};

const TEST: &str = "report_totals_match_sacct_and_the_page_renders";
/// The flat grid intensity of the test's carbon file (gCO2/kWh).
const INTENSITY_G_PER_KWH: f64 = 180.0;

/// nobody's job name: a forged sacct row (user alice, account physics, 1 PJ) after a `|`, and a
/// newline that would start a row of its own.
const FORGED_NAME: &str = "x|alice|physics|gpu|COMPLETED|1700000000|1700003600|3600|gres/gpu=8|999999999999|n1|energy:policy=performance \n42|alice|physics";

fn data_dir() -> PathBuf {
    model::data::default_data_dir()
}

/// `Time,Carbon Intensity` rows every 30 min from 3 h before to 3 h after now (UTC civil times
/// from `date -u`), all at [`INTENSITY_G_PER_KWH`].
fn write_intensity_file(path: &Path) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    let first = now - now.rem_euclid(1_800) - 3 * 3_600;
    let mut text = String::from("Time,Carbon Intensity\n");
    for i in 0..13 {
        let out = Command::new("date").args(["-u", "-d", &format!("@{}", first + i * 1_800), "+%Y-%m-%d %H:%M:%S"]).output().expect("run date");
        text.push_str(&format!("{},{INTENSITY_G_PER_KWH}\n", String::from_utf8_lossy(&out.stdout).trim()));
    }
    std::fs::write(path, text).expect("write the intensity file");
}

/// Waits until sacct lists `count` allocations of job `id` (array tasks count one by one), all
/// ended, and returns their states.
fn wait_ended(cluster: &LocalCluster, id: u32, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let out = cluster.command("sacct").args(["-X", "-n", "-P", "-j", &id.to_string(), "-o", "State"]).output().expect("run sacct");
        let states: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
        let ended = states.len() == count && states.iter().all(|s| !["PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED"].contains(&s.as_str()));
        if ended {
            return states;
        }
        assert!(Instant::now() < deadline, "job {id}: {states:?} after 240 s");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// chromium from the Debian package: found on the PATH, else installed with apt-get.
fn chromium() -> Option<PathBuf> {
    let find = || {
        ["chromium", "chromium-headless-shell", "google-chrome"]
            .iter()
            .flat_map(|name| std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).map(move |d| d.join(name)).collect::<Vec<_>>())
            .find(|p| p.is_file())
    };
    if let Some(found) = find() {
        return Some(found);
    }
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", "chromium"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .ok()?;
    if status.success() { find() } else { None }
}

/// Renders `html` with headless chromium into `png` (1200 x 1500) and returns (width, height,
/// distinct colours, share of non-white pixels).
fn render(chromium: &Path, html: &Path, png: &Path) -> (u32, u32, usize, f64) {
    let profile = tempfile::tempdir().expect("chromium profile dir");
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1500"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("run chromium");
    assert!(png.is_file(), "chromium wrote no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::fs::File::open(png).expect("open the screenshot"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "colour type {:?}", info.color_type);
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let colours: std::collections::BTreeSet<[u8; 3]> = pixels.iter().map(|p| [p[0], p[1], p[2]]).collect();
    let inked = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    (info.width, info.height, colours.len(), inked as f64 / pixels.len().max(1) as f64)
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn report_totals_match_sacct_and_the_page_renders() {
    if skip_live_test(TEST) {
        return;
    }
    let Some(chromium) = chromium() else {
        return skip_for(TEST, "chromium is not installed and apt-get could not install it");
    };
    if !data_dir().join("zeus").is_dir() {
        return skip_for(TEST, "no measured data (zeus/) for sched/energy's predictor: set SLURM_ENERGY_DATA");
    }
    let t0 = Instant::now();
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir").join("plugin-builds");
    let project = default_project_dir();
    let slurm_src = std::env::var_os("SLURM_SRC_DIR").map(PathBuf::from);
    let plugins: PluginFiles = build_plugins(&project, slurm_src.as_deref(), false, Some(&target)).unwrap_or_else(|e| panic!("plugins: {e}"));
    let gpu_files = plugins.gpu.clone().expect("the GPU plugins and the fake NVML are built");
    let site = FakeGpuSite::create(&gpu_files).unwrap_or_else(|e| panic!("fake GPUs: {e}"));
    let energy_toml = std::fs::read_to_string(project.join("etc/energy.toml")).expect("etc/energy.toml");
    let setup = DemoSetup { plugins: Some(plugins), data_dir: Some(data_dir()), ..DemoSetup::default() };
    let demo = DemoCluster::start(&energy_toml, &setup, Some(site)).unwrap_or_else(|e| panic!("cluster: {e}"));

    let workload = vec![
        DemoJob::new("perf", 2, 4, &["--energy-policy=performance"]),
        DemoJob::new("eff", 2, 4, &["--energy-policy=efficiency", "--energy-max-slowdown=1.5"]),
        DemoJob::new("tagged", 1, 3, &["--energy-tag=sweep"]),
    ];
    let rows = demo.run_workload(&workload, Duration::from_secs(240), false).unwrap_or_else(|e| panic!("workload: {e}"));
    assert!(rows.iter().all(|r| r.state == "COMPLETED"), "{rows:?}");
    let script = demo.gpus().expect("fake GPUs").job_script(3);
    let array = demo.cluster.sbatch(&["-J", "arr", "--array=0-1", "--gres=gpu:1", "--energy-policy=efficiency"], &script).expect("sbatch array");
    let other_user = demo
        .cluster
        // A hostile name (security review #2): sacct's separator, a newline and the fields of a
        // forged row naming user alice with a petajoule; it must change no other field.
        .sbatch(&["-J", FORGED_NAME, "--uid=nobody", "--gres=gpu:1", "-o", "/dev/null", "--chdir=/tmp", "--wrap", "sleep 3"], "")
        .expect("sbatch as nobody");
    assert!(wait_ended(&demo.cluster, array, 2).iter().all(|s| s == "COMPLETED"));
    assert_eq!(wait_ended(&demo.cluster, other_user, 1), ["COMPLETED"]);

    let work = tempfile::tempdir().expect("temp dir");
    let (json_path, html_path, carbon_path) = (work.path().join("report.json"), work.path().join("report.html"), work.path().join("ci.csv"));
    write_intensity_file(&carbon_path);
    let out = demo
        .cluster
        .command(env!("CARGO_BIN_EXE_slurm-energy"))
        .args(["report", "--start", "now-2hours", "--json"])
        .arg(&json_path)
        .arg("--html")
        .arg(&html_path)
        .arg("--carbon")
        .arg(&carbon_path)
        .arg("--data")
        .arg(data_dir())
        .output()
        .expect("run slurm-energy report");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "report failed: {}{}", table, String::from_utf8_lossy(&out.stderr));
    println!("{table}");

    // sacct's own sum over the same window, read apart from the report's parser.
    let sacct = demo.cluster.command("sacct").args(["-a", "-X", "-n", "-P", "-S", "now-2hours", "-o", "ConsumedEnergyRaw"]).output().expect("sacct");
    let sacct_j: f64 = String::from_utf8_lossy(&sacct.stdout).lines().filter_map(|l| l.trim().parse::<f64>().ok()).sum();
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json_path).expect("the JSON")).expect("valid JSON");
    let total_j = report["totals"]["energy_j"].as_f64().expect("totals.energy_j");
    println!("report {total_j} J, sacct {sacct_j} J");
    assert!(sacct_j > 0.0, "the fake GPUs gave sacct no energy");
    assert!((total_j - sacct_j).abs() <= 0.01 * sacct_j, "report {total_j} J vs sacct {sacct_j} J");
    assert_eq!(report["totals"]["jobs"].as_u64(), Some(6), "3 jobs, 2 array tasks, 1 of nobody: {}", report["totals"]);
    assert_eq!(report["array_tasks"].as_u64(), Some(2));

    let users = report["users"].as_array().expect("users");
    let names: Vec<&str> = users.iter().filter_map(|u| u["name"].as_str()).collect();
    assert!(names.contains(&"root") && names.contains(&"nobody"), "{names:?}");
    assert_eq!(names.len(), 2, "the forged job name added a user: {names:?}");
    let mut user_sum = 0.0;
    for u in users {
        let energy_j = u["energy_j"].as_f64().expect("energy_j");
        let carbon_g = u["carbon_g"].as_f64().unwrap_or_else(|| panic!("{} has no carbon_g: {u}", names.join(",")));
        assert!(energy_j > 0.0, "{u}");
        // Flat intensity: carbon is energy in kWh times it.
        assert!((carbon_g - energy_j / 3.6e6 * INTENSITY_G_PER_KWH).abs() < 1e-6 * energy_j.max(1.0), "{u}");
        user_sum += energy_j;
    }
    assert!((user_sum - total_j).abs() < 1e-6);
    // The tag reaches accounting through the decision record (`tag=`).
    let tags: Vec<&str> = report["tags"].as_array().expect("tags").iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(tags.contains(&"sweep"), "the --energy-tag=sweep job is not grouped under its tag: {tags:?}");
    // Decision records: every job of the workload has one; efficiency ran below the default.
    assert!(report["decisions"]["jobs_with_record"].as_u64().unwrap_or(0) >= 5, "{}", report["decisions"]);
    let saved = report["totals"]["energy_saved_j"].as_f64().expect("energy_saved_j");
    assert!(saved > 0.0, "efficiency jobs at lower clocks save energy against the default: {saved}");

    let png = work.path().join("report.png");
    let (w, h, colours, inked) = render(&chromium, &html_path, &png);
    println!("screenshot {w}x{h}, {colours} colours, {:.1} % non-white", inked * 100.0);
    assert_eq!((w, h), (1200, 1500));
    assert!(colours > 50, "{colours} colours: the page did not render its plots");
    assert!(inked > 0.03 && inked < 0.9, "{:.3} of the pixels are not white", inked);
    if let Some(dir) = std::env::var_os("SLURM_ENERGY_REPORT_SCREENSHOT_DIR") {
        std::fs::copy(&png, Path::new(&dir).join("report.png")).expect("copy the screenshot");
    }
    demo.stop().expect("stop the cluster");
    println!("live report test {:.1} s", t0.elapsed().as_secs_f64());
}

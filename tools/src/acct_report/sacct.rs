//! Reading the accounting records: the `sacct` command line the report runs, and the parser of
//! its `--parsable2 --noheader` output (one job allocation per line, `|`-separated, in
//! [`FIELDS`] order). Bad lines are errors naming the source, the line and the reason.

use std::path::PathBuf;
use std::process::Command;

use super::window::Window;

/// The `sacct --format` fields read, in this order:
///
/// - `JobIDRaw`: unique id of the allocation (array tasks have their own);
/// - `JobID`: the id users see (`123_4` for array task 4 of array 123);
/// - `JobName`, `User`, `Account`, `Partition`, `State` (first word: `CANCELLED by 0` → `CANCELLED`);
/// - `Start`, `End`: unix seconds (the report sets `SLURM_TIME_FORMAT=%s`); `Unknown` or `None`
///   for a job that has not started or not ended;
/// - `ElapsedRaw`: seconds run so far;
/// - `AllocTRES`: for the GPU count, `gres/gpu=N`;
/// - `ConsumedEnergyRaw`: joules; blank or Slurm's NO_VAL means unknown (not zero);
/// - `NodeList`;
/// - `AdminComment`: where sched/energy writes its decision record; it is last because it is
///   free text and may itself contain `|`.
pub const FIELDS: [&str; 13] = [
    "JobIDRaw",
    "JobID",
    "JobName",
    "User",
    "Account",
    "Partition",
    "State",
    "Start",
    "End",
    "ElapsedRaw",
    "AllocTRES",
    "ConsumedEnergyRaw",
    "NodeList",
];

/// `AdminComment`, read after [`FIELDS`].
pub const LAST_FIELD: &str = "AdminComment";

/// Values at or above this are Slurm's "no value" markers (`NO_VAL64` and `INFINITE64`), never
/// a measurement.
const NO_VAL64_MIN: u64 = 0xffff_ffff_ffff_fff0;

/// One job allocation (`sacct -X` line).
#[derive(Debug, Clone, PartialEq)]
pub struct SacctJob {
    pub job_id_raw: String,
    pub job_id: String,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    /// First word of `State`.
    pub state: String,
    pub start_unix_s: Option<i64>,
    pub end_unix_s: Option<i64>,
    pub elapsed_s: u64,
    pub gpus: u32,
    /// `None`: sacct had no energy for the job (blank or NO_VAL).
    pub energy_j: Option<f64>,
    pub node_list: String,
    pub admin_comment: String,
}

impl SacctJob {
    /// Still running (or suspended, or ending): its energy and elapsed time are those so far.
    pub fn is_running(&self) -> bool {
        self.end_unix_s.is_none() && self.start_unix_s.is_some()
    }

    /// An array task (`123_4`) rather than a plain job.
    pub fn is_array_task(&self) -> bool {
        self.job_id.contains('_')
    }
}

/// A line that could not be read: where and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SacctError {
    /// The file read, or `sacct` when read from the command.
    pub source: String,
    /// 1-based line; 0 for an error about the whole input.
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for SacctError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.source, self.reason)
        } else {
            write!(f, "{}:{}: {}", self.source, self.line, self.reason)
        }
    }
}

impl std::error::Error for SacctError {}

/// The `--format` argument.
pub fn format_arg() -> String {
    let mut fields: Vec<&str> = FIELDS.to_vec();
    fields.push(LAST_FIELD);
    fields.join(",")
}

/// The command that lists every user's job allocations (`-a -X`) of the window, parsable, times
/// as unix seconds, on the cluster `SLURM_CONF` names (inherited from the environment).
pub fn command(sacct: &std::path::Path, window: &Window) -> Command {
    let mut cmd = Command::new(sacct);
    cmd.env("SLURM_TIME_FORMAT", "%s")
        .args(["--parsable2", "--noheader", "--allusers", "--allocations"])
        .arg(format!("--format={}", format_arg()));
    if let Some(start) = &window.start {
        cmd.arg(format!("--starttime={start}"));
    }
    if let Some(end) = &window.end {
        cmd.arg(format!("--endtime={end}"));
    }
    cmd
}

/// Runs [`command`] and parses its output.
pub fn run(sacct: &std::path::Path, window: &Window) -> Result<Vec<SacctJob>, SacctError> {
    let whole = |reason: String| SacctError { source: "sacct".into(), line: 0, reason };
    let out = command(sacct, window)
        .output()
        .map_err(|e| whole(format!("could not run {}: {e}", sacct.display())))?;
    if !out.status.success() {
        return Err(whole(format!(
            "{} exited with {}: {}",
            sacct.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8(out.stdout).map_err(|e| whole(format!("output is not UTF-8: {e}")))?;
    parse(&text, "sacct")
}

/// Reads a file holding `sacct` output in the same format (e.g. captured on another host).
pub fn read_file(path: &std::path::Path) -> Result<Vec<SacctJob>, SacctError> {
    let text = std::fs::read_to_string(path).map_err(|e| SacctError {
        source: path.display().to_string(),
        line: 0,
        reason: e.to_string(),
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses `sacct --parsable2 --noheader --format=<format_arg()>` output. Blank lines are skipped.
pub fn parse(text: &str, source: &str) -> Result<Vec<SacctJob>, SacctError> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |reason: String| SacctError { source: source.to_string(), line: i + 1, reason };
        jobs.push(parse_line(line).map_err(err)?);
    }
    Ok(jobs)
}

fn parse_line(line: &str) -> Result<SacctJob, String> {
    let mut cells = line.splitn(FIELDS.len() + 1, '|');
    let mut next = |name: &str| cells.next().ok_or_else(|| format!("{} fields expected, no {name}", FIELDS.len() + 1));
    let job_id_raw = next("JobIDRaw")?.trim().to_string();
    let job_id = next("JobID")?.trim().to_string();
    let name = next("JobName")?.to_string();
    let user = next("User")?.trim().to_string();
    let account = next("Account")?.trim().to_string();
    let partition = next("Partition")?.trim().to_string();
    let state = next("State")?.split_whitespace().next().unwrap_or("").to_string();
    let start = next("Start")?;
    let end = next("End")?;
    let elapsed = next("ElapsedRaw")?;
    let tres = next("AllocTRES")?;
    let energy = next("ConsumedEnergyRaw")?;
    let node_list = next("NodeList")?.trim().to_string();
    let admin_comment = next(LAST_FIELD)?.trim().to_string();

    if job_id_raw.is_empty() || !job_id_raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("JobIDRaw {job_id_raw:?} is not a job id"));
    }
    if state.is_empty() {
        return Err("empty State".into());
    }
    Ok(SacctJob {
        job_id_raw,
        job_id,
        name,
        user,
        account,
        partition,
        state,
        start_unix_s: time_field("Start", start)?,
        end_unix_s: time_field("End", end)?,
        elapsed_s: elapsed
            .trim()
            .parse()
            .map_err(|_| format!("ElapsedRaw {elapsed:?} is not a number of seconds"))?,
        gpus: gpus_of(tres)?,
        energy_j: energy_field(energy)?,
        node_list,
        admin_comment,
    })
}

/// Unix seconds, or `None` for the words sacct prints when there is no time.
fn time_field(name: &str, value: &str) -> Result<Option<i64>, String> {
    match value.trim() {
        "" | "Unknown" | "None" => Ok(None),
        v => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| format!("{name} {v:?} is not unix seconds (run sacct with SLURM_TIME_FORMAT=%s)")),
    }
}

/// Joules; blank or NO_VAL is unknown.
fn energy_field(value: &str) -> Result<Option<f64>, String> {
    let v = value.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let joules: u64 = v
        .parse()
        .map_err(|_| format!("ConsumedEnergyRaw {v:?} is not a number of joules"))?;
    Ok((joules < NO_VAL64_MIN).then_some(joules as f64))
}

/// GPUs in an `AllocTRES` list: `gres/gpu=N`, else the sum of the typed `gres/gpu:TYPE=N`.
fn gpus_of(tres: &str) -> Result<u32, String> {
    let mut untyped = None;
    let mut typed = 0u32;
    for item in tres.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("AllocTRES item {item:?} has no '='"));
        };
        let count = || value.parse::<u32>().map_err(|_| format!("AllocTRES {key}={value:?} is not a count"));
        if key == "gres/gpu" {
            untyped = Some(count()?);
        } else if key.starts_with("gres/gpu:") {
            typed = typed.saturating_add(count()?);
        }
    }
    Ok(untyped.unwrap_or(typed))
}

/// Where `sacct` is: `$SLURM_ENERGY_SACCT`, else `sacct` on the PATH.
pub fn default_sacct() -> PathBuf {
    std::env::var_os("SLURM_ENERGY_SACCT").map_or_else(|| PathBuf::from("sacct"), PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "17|17|train|alice|physics|gpu|COMPLETED|1700000000|1700000100|100|billing=2,cpu=2,gres/gpu=2,node=1|12345|n1|energy:policy=balanced clock=1200MHz";

    #[test]
    fn a_line_is_read_field_by_field() {
        let jobs = parse(LINE, "t").expect("parses");
        let j = &jobs[0];
        assert_eq!((j.job_id_raw.as_str(), j.user.as_str(), j.account.as_str()), ("17", "alice", "physics"));
        assert_eq!((j.start_unix_s, j.end_unix_s, j.elapsed_s, j.gpus), (Some(1_700_000_000), Some(1_700_000_100), 100, 2));
        assert_eq!(j.energy_j, Some(12_345.0));
        assert!(j.admin_comment.starts_with("energy:"));
        assert!(!j.is_running());
    }

    #[test]
    fn unknown_energy_is_none_not_zero() {
        let blank = LINE.replace("|12345|", "||");
        assert_eq!(parse(&blank, "t").expect("blank").first().and_then(|j| j.energy_j), None);
        let no_val = LINE.replace("|12345|", "|18446744073709551614|");
        assert_eq!(parse(&no_val, "t").expect("no_val").first().and_then(|j| j.energy_j), None);
        let zero = LINE.replace("|12345|", "|0|");
        assert_eq!(parse(&zero, "t").expect("zero").first().and_then(|j| j.energy_j), Some(0.0));
    }

    #[test]
    fn running_jobs_and_typed_gpus() {
        let running = LINE.replace("|1700000100|", "|Unknown|").replace("gres/gpu=2", "gres/gpu:v100=3");
        let j = &parse(&running, "t").expect("running")[0];
        assert!(j.is_running());
        assert_eq!(j.gpus, 3);
        let cancelled = LINE.replace("|COMPLETED|", "|CANCELLED by 0|");
        assert_eq!(parse(&cancelled, "t").expect("cancelled")[0].state, "CANCELLED");
    }

    #[test]
    fn admin_comment_may_contain_the_separator() {
        let j = &parse(&format!("{LINE}; site|note"), "t").expect("pipe in comment")[0];
        assert!(j.admin_comment.ends_with("site|note"));
    }

    #[test]
    fn bad_lines_name_the_line_and_the_field() {
        let text = format!("{LINE}\n\n{}\n", LINE.replace("|100|", "|ten|"));
        let e = parse(&text, "fixture.txt").expect_err("bad ElapsedRaw");
        assert_eq!((e.source.as_str(), e.line), ("fixture.txt", 3));
        assert!(e.reason.contains("ElapsedRaw"), "{e}");
        assert_eq!(e.to_string(), format!("fixture.txt:3: {}", e.reason));
        let e = parse("1|1|short", "f").expect_err("too few fields");
        assert_eq!(e.line, 1);
        assert!(e.reason.contains("no User"), "{e}");
        let e = parse(&LINE.replace("|1700000000|", "|2026-11-25T02:00:00|"), "f").expect_err("civil time");
        assert!(e.reason.contains("SLURM_TIME_FORMAT"), "{e}");
    }
}

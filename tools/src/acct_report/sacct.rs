//! Reading the accounting records: the `sacct` command line the report runs, and the parser of
//! its output (one job allocation per record, fields in [`FIELDS`] order, then
//! [`LAST_FIELD`]).
//!
//! Job names are free text chosen by users, and sacct prints fields raw: a name may hold `|`,
//! newlines, or the text of other fields. So the report runs sacct with a delimiter of its own,
//! drawn at random for each run ([`Delimiter::random`]), that no user can know when they name a
//! job; a record is the text between one delimiter count and the next, whatever lines a name
//! spans. A name cannot move another field, and a record that cannot be read is skipped and
//! counted ([`SacctRead::skipped`]), never the end of the report. Captured files carry sacct's
//! header line, from which the delimiter is read; a file without one is read the old way (`|`,
//! see [`parse`]).

use std::path::PathBuf;
use std::process::Command;

use super::window::Window;

/// The `sacct --format` fields read, in this order:
///
/// - `JobIDRaw`: unique id of the allocation (array tasks have their own);
/// - `JobID`: the id users see (`123_4` for array task 4 of array 123);
/// - `JobName` (the user's free text: any bytes but NUL), `User`, `Account`, `Partition`,
///   `State` (first word: `CANCELLED by 0` → `CANCELLED`);
/// - `Start`, `End`: unix seconds (the report sets `SLURM_TIME_FORMAT=%s`); `Unknown` or `None`
///   for a job that has not started or not ended;
/// - `ElapsedRaw`: seconds run so far;
/// - `AllocTRES`: for the GPU count, `gres/gpu=N`;
/// - `ConsumedEnergyRaw`: joules; blank or Slurm's NO_VAL means unknown (not zero);
/// - `NodeList`;
/// - `AdminComment`: where sched/energy writes its decision record; it is last because it is
///   free text (a site may append to it), so it may hold `|` and newlines.
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

/// Delimiters in one record of `--parsable2` output (none after the last field).
const DELIMITERS_PER_RECORD: usize = FIELDS.len();

/// Skipped records listed one by one in the report (all are counted).
pub const MAX_SKIPPED_LISTED: usize = 20;

/// Values at or above this are Slurm's "no value" markers (`NO_VAL64` and `INFINITE64`), never
/// a measurement.
const NO_VAL64_MIN: u64 = 0xffff_ffff_ffff_fff0;

/// One job allocation (`sacct -X` record).
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

/// A record that could not be read (where and why), or an error about the whole input.
#[derive(Debug, Clone, PartialEq)]
pub struct SacctError {
    /// The file read, or `sacct` when read from the command.
    pub source: String,
    /// 1-based line where the record starts; 0 for an error about the whole input.
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

/// What was read from sacct's output.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SacctRead {
    pub jobs: Vec<SacctJob>,
    /// Records that could not be read, each with the line it starts on and why. They are left
    /// out of every figure and counted in the report.
    pub skipped: Vec<SacctError>,
    /// The output had no header line and was read with sacct's default `|`: a job name holding
    /// `|` or a newline can shift that job's fields (only captures made the old way).
    pub legacy_delimiter: bool,
}

/// The string between fields, passed to sacct as `--delimiter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delimiter(String);

impl Delimiter {
    /// A fresh delimiter: `|` and 32 hex digits of the kernel's random numbers. No user can
    /// know it when naming a job, so no job name holds it; and as its first character occurs
    /// in it only once, no text can end with a part of it that, with the real delimiter after
    /// it, reads as a delimiter one place early.
    pub fn random() -> Result<Delimiter, String> {
        use std::io::Read as _;
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|e| format!("no random delimiter for sacct (/dev/urandom: {e})"))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Delimiter(format!("|{hex}")))
    }

    /// A given delimiter (tests, fuzzing, captured files); `None` if empty.
    pub fn new(text: &str) -> Option<Delimiter> {
        (!text.is_empty()).then(|| Delimiter(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The `--format` argument.
pub fn format_arg() -> String {
    let mut fields: Vec<&str> = FIELDS.to_vec();
    fields.push(LAST_FIELD);
    fields.join(",")
}

/// sacct's header line for [`format_arg`] with `--parsable2 --delimiter=<delimiter>`.
pub fn header_line(delimiter: &Delimiter) -> String {
    let mut fields: Vec<&str> = FIELDS.to_vec();
    fields.push(LAST_FIELD);
    fields.join(delimiter.as_str())
}

/// The command that lists every user's job allocations (`-a -X`) of the window, parsable with
/// `delimiter` between fields, with its header line (which confirms the delimiter), times as
/// unix seconds, on the cluster `SLURM_CONF` names (inherited from the environment).
pub fn command(sacct: &std::path::Path, window: &Window, delimiter: &Delimiter) -> Command {
    let mut cmd = Command::new(sacct);
    cmd.env("SLURM_TIME_FORMAT", "%s")
        .args(["--parsable2", "--allusers", "--allocations"])
        .arg(format!("--delimiter={}", delimiter.as_str()))
        .arg(format!("--format={}", format_arg()));
    if let Some(start) = &window.start {
        cmd.arg(format!("--starttime={start}"));
    }
    if let Some(end) = &window.end {
        cmd.arg(format!("--endtime={end}"));
    }
    cmd
}

/// Runs [`command`] with a [`Delimiter::random`] and parses its output.
pub fn run(sacct: &std::path::Path, window: &Window) -> Result<SacctRead, SacctError> {
    let whole = |reason: String| SacctError { source: "sacct".into(), line: 0, reason };
    let delimiter = Delimiter::random().map_err(whole)?;
    let out = command(sacct, window, &delimiter)
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
    // A job name may hold any bytes: one that is not UTF-8 must not stop the report (the
    // replacement characters cannot form the ASCII delimiter).
    parse_output(&String::from_utf8_lossy(&out.stdout), "sacct", &delimiter)
}

/// Reads a file holding `sacct` output (e.g. captured on another host): with sacct's header
/// line (the delimiter is read from it), or the old `--noheader` `|` form.
pub fn read_file(path: &std::path::Path) -> Result<SacctRead, SacctError> {
    let bytes = std::fs::read(path).map_err(|e| SacctError {
        source: path.display().to_string(),
        line: 0,
        reason: e.to_string(),
    })?;
    Ok(parse(&String::from_utf8_lossy(&bytes), &path.display().to_string()))
}

/// Parses the output of the report's own sacct run: the first line must be the header with
/// `delimiter` (else sacct did not take `--delimiter`, and the fields cannot be trusted).
pub fn parse_output(text: &str, source: &str, delimiter: &Delimiter) -> Result<SacctRead, SacctError> {
    if text.trim().is_empty() {
        return Ok(SacctRead::default());
    }
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    if !first.trim_end_matches('\r').eq_ignore_ascii_case(&header_line(delimiter)) {
        return Err(SacctError {
            source: source.to_string(),
            line: 1,
            reason: format!("not the header line of --parsable2 --delimiter={} (sacct too old?)", delimiter.as_str()),
        });
    }
    Ok(read_records(rest, 2, source, delimiter.as_str(), false))
}

/// Parses captured sacct output: `--parsable2` with the header line (any `--delimiter`; the
/// header tells which), else the old `--parsable2 --noheader` form with `|`, read as well as it
/// can be ([`SacctRead::legacy_delimiter`]). Blank lines between records are skipped.
pub fn parse(text: &str, source: &str) -> SacctRead {
    let first_line = text.split('\n').position(|l| !l.trim().is_empty());
    let Some(first_line) = first_line else { return SacctRead::default() };
    let mut lines = text.splitn(first_line + 2, '\n');
    let header = lines.nth(first_line).unwrap_or("").trim_end_matches('\r');
    let rest = lines.next().unwrap_or("");
    match header_delimiter(header) {
        Some(d) => read_records(rest, first_line + 2, source, &d, false),
        None => {
            let body = text.splitn(first_line + 1, '\n').last().unwrap_or("");
            read_records(body, first_line + 1, source, "|", true)
        }
    }
}

/// The delimiter of a `--parsable2` header line of [`format_arg`]'s fields, if it is one.
fn header_delimiter(line: &str) -> Option<String> {
    let names_len: usize = FIELDS.iter().map(|f| f.len()).sum::<usize>() + LAST_FIELD.len();
    let delimiters_len = line.len().checked_sub(names_len)?;
    if delimiters_len == 0 || delimiters_len % DELIMITERS_PER_RECORD != 0 {
        return None;
    }
    let first = FIELDS[0].len();
    let d = line.get(first..first + delimiters_len / DELIMITERS_PER_RECORD)?;
    let delimiter = Delimiter::new(d)?;
    header_line(&delimiter).eq_ignore_ascii_case(line).then(|| d.to_string())
}

/// One record's text as gathered from its lines.
struct Pending {
    first_line: usize,
    text: String,
    delimiters: usize,
}

/// Reads the records of `body` (its first line is line `first_line` of the input).
///
/// A record holds [`DELIMITERS_PER_RECORD`] delimiters; while it has fewer, the next line is
/// part of it (a job name with newlines). Once complete, a following line without any delimiter
/// continues its last field (an AdminComment with newlines); any other line starts the next
/// record. A line that would take a record past its count means the record was cut short: it
/// is skipped, and the line starts the next one.
fn read_records(body: &str, first_line: usize, source: &str, delimiter: &str, legacy: bool) -> SacctRead {
    let mut read = SacctRead { legacy_delimiter: legacy, ..SacctRead::default() };
    let mut pending: Option<Pending> = None;
    let finish = |p: Pending, read: &mut SacctRead| match parse_record(&p.text, delimiter, legacy) {
        Ok(job) => read.jobs.push(job),
        Err(reason) => read.skipped.push(SacctError { source: source.to_string(), line: p.first_line, reason }),
    };
    for (i, line) in body.split('\n').enumerate() {
        let count = line.matches(delimiter).count();
        let line_no = first_line + i;
        pending = match pending.take() {
            None if line.trim().is_empty() => None,
            None => Some(Pending { first_line: line_no, text: line.to_string(), delimiters: count }),
            Some(mut p) if p.delimiters < DELIMITERS_PER_RECORD && p.delimiters + count <= DELIMITERS_PER_RECORD => {
                p.text.push('\n');
                p.text.push_str(line);
                p.delimiters += count;
                Some(p)
            }
            Some(mut p) if p.delimiters >= DELIMITERS_PER_RECORD && count == 0 => {
                p.text.push('\n');
                p.text.push_str(line);
                Some(p)
            }
            Some(p) => {
                if p.delimiters < DELIMITERS_PER_RECORD {
                    read.skipped.push(SacctError {
                        source: source.to_string(),
                        line: p.first_line,
                        reason: format!(
                            "record cut short: {} fields, {} expected",
                            p.delimiters + 1,
                            DELIMITERS_PER_RECORD + 1
                        ),
                    });
                } else {
                    finish(p, &mut read);
                }
                (!line.trim().is_empty()).then(|| Pending { first_line: line_no, text: line.to_string(), delimiters: count })
            }
        };
    }
    if let Some(p) = pending {
        finish(p, &mut read);
    }
    read
}

/// One record. With the run's own delimiter a record has exactly its fields; with the old `|`,
/// extra separators are taken as part of the AdminComment (the best that form allows).
fn parse_record(record: &str, delimiter: &str, legacy: bool) -> Result<SacctJob, String> {
    let cells: Vec<&str> = if legacy {
        record.splitn(FIELDS.len() + 1, delimiter).collect()
    } else {
        record.split(delimiter).collect()
    };
    if cells.len() != FIELDS.len() + 1 {
        return Err(format!("{} fields, {} expected", cells.len(), FIELDS.len() + 1));
    }
    parse_fields(&cells)
}

/// The fields of one record, [`FIELDS`] then [`LAST_FIELD`].
fn parse_fields(cells: &[&str]) -> Result<SacctJob, String> {
    let mut cells = cells.iter().copied();
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

    /// The review's forgery (security-2026-11-27.md, finding 2): the fields after the name, with
    /// another user, account, 8 GPUs, 1 PJ and a fake decision record.
    const FORGERY: &str = "x|alice|physics|gpu|COMPLETED|1700000000|1700003600|3600|gres/gpu=8|999999999999|n1|energy:policy=performance clock=1530MHz carbon_g=99999 ";

    /// Parses captured output that must have no skipped record.
    fn jobs(text: &str) -> Vec<SacctJob> {
        let read = parse(text, "t");
        assert!(read.skipped.is_empty(), "{:?}", read.skipped);
        read.jobs
    }

    /// The fields of mallory's job named `name`, in [`FIELDS`] + AdminComment order.
    fn mallory(id: u32, name: &str) -> Vec<String> {
        let id = id.to_string();
        [id.as_str(), &id, name, "mallory", "students", "gpu", "COMPLETED", "1700000000", "1700000060", "60", "gres/gpu=1", "500", "n2", "energy:policy=balanced clock=1200MHz"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// What sacct prints for the report's command (common/print_fields.c with --parsable2 and
    /// --delimiter: the header, then each field followed by the delimiter but the last, no escaping).
    fn sacct_prints(delimiter: &Delimiter, rows: &[Vec<String>]) -> String {
        let mut out = header_line(delimiter) + "\n";
        for row in rows {
            out.push_str(&row.join(delimiter.as_str()));
            out.push('\n');
        }
        out
    }

    fn run_output(rows: &[Vec<String>]) -> SacctRead {
        let d = Delimiter::random().expect("random delimiter");
        parse_output(&sacct_prints(&d, rows), "sacct", &d).expect("header")
    }

    fn assert_mallory(j: &SacctJob, id: &str, name: &str) {
        assert_eq!(
            (j.job_id_raw.as_str(), j.name.as_str(), j.user.as_str(), j.account.as_str(), j.gpus, j.energy_j),
            (id, name, "mallory", "students", 1, Some(500.0))
        );
        assert_eq!((j.start_unix_s, j.end_unix_s, j.elapsed_s), (Some(1_700_000_000), Some(1_700_000_060), 60));
        assert_eq!(j.admin_comment, "energy:policy=balanced clock=1200MHz");
    }

    #[test]
    fn the_reviews_forgery_name_changes_no_other_field() {
        let read = run_output(&[mallory(42, FORGERY), mallory(43, "fine")]);
        assert!(read.skipped.is_empty() && !read.legacy_delimiter, "{read:?}");
        assert_eq!(read.jobs.len(), 2);
        assert_mallory(&read.jobs[0], "42", FORGERY);
        assert_mallory(&read.jobs[1], "43", "fine");
    }

    #[test]
    fn a_name_with_newlines_is_one_field_of_one_record() {
        // A newline, then what would be a whole forged record, then an empty line.
        let name = format!("first\n99|99|{FORGERY}\n\nlast");
        let read = run_output(&[mallory(42, &name), mallory(43, "\nleading newline"), mallory(44, "trailing\n")]);
        assert!(read.skipped.is_empty(), "{:?}", read.skipped);
        assert_eq!(read.jobs.len(), 3, "{:?}", read.jobs);
        assert_mallory(&read.jobs[0], "42", &name);
        assert_mallory(&read.jobs[1], "43", "\nleading newline");
        assert_mallory(&read.jobs[2], "44", "trailing\n");
    }

    #[test]
    fn a_name_with_the_separator_does_not_stop_the_report() {
        let read = run_output(&[mallory(41, "a|b"), mallory(42, "|"), mallory(43, "||||||||||||||||||||")]);
        assert!(read.skipped.is_empty(), "{:?}", read.skipped);
        let names: Vec<&str> = read.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["a|b", "|", "||||||||||||||||||||"]);
    }

    #[test]
    fn an_admin_comment_with_newlines_stays_with_its_job() {
        let mut row = mallory(42, "x");
        row[13] = "energy:policy=balanced clock=1200MHz; site note\nsecond line".into();
        let read = run_output(&[row, mallory(43, "y")]);
        assert!(read.skipped.is_empty(), "{:?}", read.skipped);
        assert_eq!(read.jobs.len(), 2);
        assert!(read.jobs[0].admin_comment.ends_with("site note\nsecond line"));
        assert_mallory(&read.jobs[1], "43", "y");
    }

    #[test]
    fn a_bad_record_is_skipped_and_counted_with_its_line_and_reason() {
        let d = Delimiter::new("<D>").expect("delimiter");
        let mut bad = mallory(42, "bad");
        bad[9] = "ten".into();
        let mut text = sacct_prints(&d, &[mallory(41, "two\nlines"), bad, mallory(43, "ok")]);
        // A record cut short (a truncated capture), then a good one.
        text.push_str("44<D>44<D>cut\n");
        text.push_str(&mallory(45, "after").join("<D>"));
        let read = parse(&text, "f.txt");
        let names: Vec<&str> = read.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["two\nlines", "ok", "after"]);
        assert_eq!(read.skipped.len(), 2, "{:?}", read.skipped);
        assert_eq!((read.skipped[0].line, read.skipped[0].source.as_str()), (4, "f.txt"));
        assert!(read.skipped[0].reason.contains("ElapsedRaw"), "{:?}", read.skipped[0]);
        assert_eq!(read.skipped[1].line, 6);
        assert!(read.skipped[1].reason.contains("cut short"), "{:?}", read.skipped[1]);
        assert_eq!(read.skipped[0].to_string(), format!("f.txt:4: {}", read.skipped[0].reason));
    }

    #[test]
    fn the_run_needs_sacct_to_have_taken_the_delimiter() {
        let d = Delimiter::random().expect("random");
        let e = parse_output(&format!("{}\n{LINE}\n", header_line(&Delimiter::new("|").expect("pipe"))), "sacct", &d).expect_err("old header");
        assert_eq!(e.line, 1);
        assert!(parse_output("", "sacct", &d).expect("no output").jobs.is_empty());
        // Two runs do not share a delimiter, and it is on sacct's command line.
        let d2 = Delimiter::random().expect("random");
        assert_ne!(d, d2);
        assert_eq!((d.as_str().len(), d.as_str().matches('|').count()), (33, 1), "{d:?}");
        let cmd = command(std::path::Path::new("sacct"), &Window::default(), &d);
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.contains(&format!("--delimiter={}", d.as_str())) && args.contains(&"--parsable2".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a == "--noheader"), "the header confirms the delimiter: {args:?}");
    }

    #[test]
    fn captured_files_give_their_delimiter_in_the_header() {
        let d = Delimiter::new(";:").expect("delimiter");
        let read = parse(&format!("\n{}", sacct_prints(&d, &[mallory(42, "a|b\nc")])), "f");
        assert!(read.skipped.is_empty() && !read.legacy_delimiter, "{read:?}");
        assert_mallory(&read.jobs[0], "42", "a|b\nc");
        assert_eq!(header_delimiter(&header_line(&d)), Some(";:".to_string()));
        assert_eq!(header_delimiter(LINE), None);
        assert_eq!(header_delimiter("JobIDRaw"), None);
    }

    #[test]
    fn a_line_is_read_field_by_field() {
        let jobs = jobs(LINE);
        let j = &jobs[0];
        assert_eq!((j.job_id_raw.as_str(), j.user.as_str(), j.account.as_str()), ("17", "alice", "physics"));
        assert_eq!((j.start_unix_s, j.end_unix_s, j.elapsed_s, j.gpus), (Some(1_700_000_000), Some(1_700_000_100), 100, 2));
        assert_eq!(j.energy_j, Some(12_345.0));
        assert!(j.admin_comment.starts_with("energy:"));
        assert!(!j.is_running());
        assert!(parse(LINE, "t").legacy_delimiter);
    }

    #[test]
    fn unknown_energy_is_none_not_zero() {
        let blank = LINE.replace("|12345|", "||");
        assert_eq!(jobs(&blank).first().and_then(|j| j.energy_j), None);
        let no_val = LINE.replace("|12345|", "|18446744073709551614|");
        assert_eq!(jobs(&no_val).first().and_then(|j| j.energy_j), None);
        let zero = LINE.replace("|12345|", "|0|");
        assert_eq!(jobs(&zero).first().and_then(|j| j.energy_j), Some(0.0));
    }

    #[test]
    fn running_jobs_and_typed_gpus() {
        let running = LINE.replace("|1700000100|", "|Unknown|").replace("gres/gpu=2", "gres/gpu:v100=3");
        let j = &jobs(&running)[0];
        assert!(j.is_running());
        assert_eq!(j.gpus, 3);
        let cancelled = LINE.replace("|COMPLETED|", "|CANCELLED by 0|");
        assert_eq!(jobs(&cancelled)[0].state, "CANCELLED");
    }

    #[test]
    fn admin_comment_may_contain_the_separator() {
        let j = &jobs(&format!("{LINE}; site|note"))[0];
        assert!(j.admin_comment.ends_with("site|note"));
    }

    #[test]
    fn bad_lines_are_skipped_naming_the_line_and_the_field() {
        let text = format!("{LINE}\n\n{}\n{LINE}\n", LINE.replace("|100|", "|ten|"));
        let read = parse(&text, "fixture.txt");
        assert_eq!(read.jobs.len(), 2);
        let e = &read.skipped[0];
        assert_eq!((e.source.as_str(), e.line), ("fixture.txt", 3));
        assert!(e.reason.contains("ElapsedRaw"), "{e}");
        assert_eq!(e.to_string(), format!("fixture.txt:3: {}", e.reason));
        let read = parse("1|1|short", "f");
        assert_eq!((read.jobs.len(), read.skipped.len(), read.skipped[0].line), (0, 1, 1));
        let read = parse(&LINE.replace("|1700000000|", "|2026-11-25T02:00:00|"), "f");
        assert!(read.skipped[0].reason.contains("SLURM_TIME_FORMAT"), "{:?}", read.skipped);
    }
}

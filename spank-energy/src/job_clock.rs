//! The clock (and power limit) sched/energy chose for a job, as the node keeps it for the job's
//! steps.
//!
//! sched/energy writes the clock into the job's SPANK environment (`SLURM_ENERGY_CLOCK_MHZ`,
//! [`model::decision::DECISION_CLOCK_ENV`]), and the measured power limit of the ladder step
//! it chose beside it (`SLURM_ENERGY_POWER_LIMIT_MW`,
//! [`model::decision::DECISION_POWER_LIMIT_ENV`]), just before it starts the job, replacing any
//! value the user put there. slurmctld sends that environment with the job to every node of it: in
//! the prolog message (`PrologFlags=Alloc`, implied by `Contain`) and in the batch launch. The
//! plugin's job prolog (`slurm_spank_job_prolog`, root, where Slurm prefixes each entry with
//! `SPANK_`) stores the value in a root-only file per job; every step of the job on that node
//! reads it there ([`read`]), without asking slurmctld; the job epilog removes it.
//!
//! The files live in `<clock ledger dir>/jobs/<job id>`: the directory slurmd's clock ledger
//! is in (root, mode 0700), so that both need one setting. Writes are atomic (temporary file
//! and rename); symlinks are refused where a file is opened.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What the job prolog sees: Slurm prefixes the job's SPANK environment with `SPANK_`.
pub const PROLOG_ENV: &str = "SPANK_SLURM_ENERGY_CLOCK_MHZ";

/// The power limit's entry as the job prolog sees it.
pub const PROLOG_POWER_ENV: &str = "SPANK_SLURM_ENERGY_POWER_LIMIT_MW";

/// Largest clock accepted (MHz): no GPU clocks above this; anything larger is not a clock.
const MAX_CLOCK_MHZ: u32 = 100_000;

/// What sched/energy decided for a job's GPUs: the clock, and the power limit of the ladder
/// step it chose (for GPUs controlled by their power limit; `None`: the clock's linear limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobDecision {
    pub clock_mhz: u32,
    pub power_limit_mw: Option<u32>,
}

impl JobDecision {
    /// The record's text: the clock, then the limit in mW if any (`1057 150000mW`).
    fn to_text(self) -> String {
        match self.power_limit_mw {
            Some(mw) => format!("{} {mw}mW\n", self.clock_mhz),
            None => format!("{}\n", self.clock_mhz),
        }
    }

    /// A record's text (also one written before the limit was kept: a clock alone).
    fn from_text(text: &str) -> Option<JobDecision> {
        let mut words = text.split_whitespace();
        let clock_mhz = parse_clock_mhz(words.next()?)?;
        let power_limit_mw = match words.next() {
            Some(w) => Some(model::decision::parse_power_limit_mw(w.strip_suffix("mW")?)?),
            None => None,
        };
        words.next().is_none().then_some(JobDecision { clock_mhz, power_limit_mw })
    }
}

/// The directory of the job records under the clock ledger directory.
pub fn records_dir(ledger_dir: &Path) -> PathBuf {
    ledger_dir.join("jobs")
}

fn record_path(dir: &Path, job_id: u32) -> PathBuf {
    dir.join(job_id.to_string())
}

/// The clock a value of [`PROLOG_ENV`] names (`1057`, `1057MHz`); `None` for anything else.
pub fn parse_clock_mhz(value: &str) -> Option<u32> {
    let v = value.trim();
    let v = v.strip_suffix("MHz").unwrap_or(v);
    v.parse::<u32>().ok().filter(|&c| c > 0 && c <= MAX_CLOCK_MHZ)
}

/// The records directory, checked as the clock ledger's is
/// ([`gpu_control::arbiter::ensure_private_dir`]): someone else's directory could plant a record.
fn secure_dir(dir: &Path) -> io::Result<()> {
    gpu_control::arbiter::ensure_private_dir(dir).map_err(|e| io::Error::other(e.to_string()))
}

/// Stores `decision` for `job_id` (replacing an earlier record of the job).
pub fn write(dir: &Path, job_id: u32, decision: JobDecision) -> io::Result<()> {
    secure_dir(dir)?;
    let path = record_path(dir, job_id);
    let tmp = dir.join(format!(".{job_id}.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        f.write_all(decision.to_text().as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// The decision recorded for `job_id`: `Ok(None)` without a record; an error for a record that
/// is not a small regular file of ours or does not hold a clock (and a limit).
pub fn read(dir: &Path, job_id: u32) -> io::Result<Option<JobDecision>> {
    let path = record_path(dir, job_id);
    let mut f = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    // SAFETY: geteuid has no preconditions.
    if !meta.is_file() || meta.uid() != unsafe { libc::geteuid() } || meta.len() > 64 {
        return Err(io::Error::other(format!("{} is not a record this plugin wrote", path.display())));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    JobDecision::from_text(&text).map(Some).ok_or_else(|| io::Error::other(format!("{}: {:?} is not a clock in MHz (and a power limit in mW)", path.display(), text.trim())))
}

/// Removes the record of `job_id`, if any.
pub fn remove(dir: &Path, job_id: u32) -> io::Result<()> {
    match fs::remove_file(record_path(dir, job_id)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spank-energy-job-clock-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn values_that_are_clocks() {
        assert_eq!(parse_clock_mhz("1057"), Some(1057));
        assert_eq!(parse_clock_mhz(" 1057MHz\n"), Some(1057));
        for bad in ["", "0", "-5", "12GHz", "1e3", "999999999", "1057 MHz x"] {
            assert_eq!(parse_clock_mhz(bad), None, "{bad:?}");
        }
    }

    fn clock(mhz: u32) -> JobDecision {
        JobDecision { clock_mhz: mhz, power_limit_mw: None }
    }

    #[test]
    fn records_with_and_without_a_limit_read_back() {
        assert_eq!(JobDecision::from_text("1057\n"), Some(clock(1057)), "a record of an earlier release");
        assert_eq!(JobDecision::from_text("1057 150000mW\n"), Some(JobDecision { clock_mhz: 1057, power_limit_mw: Some(150_000) }));
        for bad in ["1057 150000", "1057 150W", "1057 0mW", "1057 150000mW x", "x 150000mW", ""] {
            assert_eq!(JobDecision::from_text(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn write_read_replace_remove() {
        let dir = records_dir(&scratch("rw"));
        assert_eq!(read(&dir, 7).unwrap(), None, "no directory yet: no record");
        write(&dir, 7, clock(1057)).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(dir.join("7")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&dir, 7).unwrap(), Some(clock(1057)));
        let with_limit = JobDecision { clock_mhz: 945, power_limit_mw: Some(437_500) };
        write(&dir, 7, with_limit).unwrap();
        assert_eq!(read(&dir, 7).unwrap(), Some(with_limit));
        assert_eq!(read(&dir, 8).unwrap(), None);
        remove(&dir, 7).unwrap();
        remove(&dir, 7).unwrap();
        assert_eq!(read(&dir, 7).unwrap(), None);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "no temporary file left behind");
    }

    #[test]
    fn symlinks_and_garbage_are_refused() {
        let base = scratch("hostile");
        let dir = records_dir(&base);
        write(&dir, 1, clock(1000)).unwrap();
        let target = base.join("elsewhere");
        fs::write(&target, "1200\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("2")).unwrap();
        assert!(read(&dir, 2).is_err(), "a symlinked record is not read");
        fs::write(dir.join("3"), "fast please").unwrap();
        assert!(read(&dir, 3).is_err());
        // A symlinked records directory is refused for writing.
        let other = scratch("hostile-link");
        fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&base, other.join("jobs")).unwrap();
        assert!(write(&records_dir(&other), 4, clock(1000)).is_err());
        assert!(!base.join("jobs").join("4").exists());
    }
}

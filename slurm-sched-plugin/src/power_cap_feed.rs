//! The site's power-cap file, live (`[power_cap] file`; format in `model::power_cap` and
//! docs/power-cap.md): read at start (a file that exists but cannot be parsed stops slurmctld
//! with the file, line and reason), looked at every `refresh_s` and re-read when its
//! modification time changed. Bad content later is logged once and the last good schedule
//! stays; a missing file means "the file says nothing" (energy.toml's `power_cap_w` holds).
//! Every change of the cap the planner plans under is logged.


use model::power_cap::{CapFileError, CapSchedule, effective_cap_w};
use slurm_bindings::slurm_log;

use crate::LOG;
use crate::config::PowerCapSettings;
use crate::watched_file::{self, FileFeed, WatchedFile};

#[derive(Debug)]
pub struct PowerCapFeed {
    file: WatchedFile,
    schedule: Option<CapSchedule>,
    /// The cap last returned (W, 0: none), to log changes.
    last_cap_w: Option<f64>,
}

impl FileFeed for PowerCapFeed {
    type Error = CapFileError;
    const WHAT: &'static str = "power cap file";
    const UNTIL_READ: &'static str = "energy.toml's power_cap_w holds";
    const KEPT: &'static str = "the schedule read before stays";

    fn file(&mut self) -> &mut WatchedFile {
        &mut self.file
    }

    fn load(&mut self) -> Result<(), CapFileError> {
        let mtime = self.file.mtime_now();
        let path = self.file.path();
        // SAFETY: geteuid() has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        trusted(path, me).map_err(|reason| CapFileError { path: path.to_path_buf(), line: None, reason })?;
        self.schedule = Some(CapSchedule::from_file(path)?);
        self.file.loaded(mtime);
        Ok(())
    }

    fn summary(&self) -> String {
        format!("{} change(s)", self.schedule.as_ref().map_or(0, |s| s.changes().len()))
    }
}

impl PowerCapFeed {
    /// `None` without `[power_cap] file`.
    pub fn start(settings: &PowerCapSettings) -> Result<Option<PowerCapFeed>, CapFileError> {
        let Some(path) = settings.file.clone() else { return Ok(None) };
        let mut feed = PowerCapFeed { file: WatchedFile::new(path, settings.refresh_s), schedule: None, last_cap_w: None };
        if watched_file::start(&mut feed)? {
            slurm_log!(LOG, info, "power cap file {}: {}", feed.file.path().display(), feed.summary());
        }
        Ok(Some(feed))
    }

    /// Re-reads the file if `refresh_s` passed and it changed. A file that became unreadable
    /// or unparsable is logged; the schedule read before stays.
    pub fn refresh(&mut self) {
        watched_file::refresh(self);
    }

    /// The cap to plan under at `now_unix_s` (W; 0: none): the file's where it says something
    /// about now, else `static_cap_w` (energy.toml's `power_cap_w`). A change is logged.
    pub fn cap_w(&mut self, static_cap_w: f64, now_unix_s: i64) -> f64 {
        let cap_w = effective_cap_w(self.schedule.as_ref(), static_cap_w, now_unix_s);
        if self.last_cap_w != Some(cap_w) {
            if cap_w > 0.0 {
                slurm_log!(LOG, info, "cluster GPU power cap now {cap_w:.0} W (power cap file {})", self.file.path().display());
            } else if self.last_cap_w.is_none() {
                slurm_log!(LOG, info, "no cluster GPU power cap in force (power cap file {})", self.file.path().display());
            } else {
                slurm_log!(LOG, info, "cluster GPU power cap lifted (power cap file {})", self.file.path().display());
            }
            self.last_cap_w = Some(cap_w);
        }
        cap_w
    }
}

/// The cap moves every job's clock: a file someone other than root or slurmctld's own user
/// could write is refused (as the clock arbiter refuses its ledger), naming what to fix.
fn trusted(path: &std::path::Path, daemon_uid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if md.uid() != 0 && md.uid() != daemon_uid {
        return Err(format!("owned by uid {}, not root or slurmctld's user (uid {daemon_uid}): chown it", md.uid()));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!("writable by group or others (mode {:o}): chmod go-w it", md.mode() & 0o7777));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(path: &std::path::Path) -> PowerCapSettings {
        PowerCapSettings { file: Some(path.to_path_buf()), refresh_s: 1.0 }
    }

    #[test]
    fn a_bad_file_at_start_is_an_error_with_its_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cap");
        std::fs::write(&path, "2026-11-27T18:00:00Z,5000\n2026-11-27T19:00:00Z,-1\n").expect("write");
        let e = PowerCapFeed::start(&settings(&path)).expect_err("bad cap");
        assert_eq!(e.line, Some(2), "{e}");
        assert!(PowerCapFeed::start(&PowerCapSettings { file: None, refresh_s: 1.0 }).expect("no file").is_none());
    }

    #[test]
    fn the_cap_follows_the_file_and_bad_content_keeps_the_last_good_schedule() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cap");
        // A missing file: the static cap holds.
        let mut feed = PowerCapFeed::start(&settings(&path)).expect("missing is fine").expect("feed");
        assert_eq!(feed.cap_w(60_000.0, 1_000), 60_000.0);
        std::fs::write(&path, "48000\n").expect("write");
        feed.file.expire();
        feed.refresh();
        assert_eq!(feed.cap_w(60_000.0, 1_000), 48_000.0);
        // Bad content: logged, the last good schedule stays.
        std::fs::write(&path, "lots\n").expect("write");
        set_mtime_later(&path, &feed);
        feed.file.expire();
        feed.refresh();
        assert!(feed.file.complaint().is_some_and(|c| c.contains(":1:")), "{:?}", feed.file.complaint());
        assert_eq!(feed.cap_w(60_000.0, 1_000), 48_000.0);
        // Fixed: read again.
        std::fs::write(&path, "1000,none\n2000,33600\n").expect("write");
        set_mtime_later(&path, &feed);
        feed.file.expire();
        feed.refresh();
        assert_eq!(feed.file.complaint(), None);
        assert_eq!(feed.cap_w(60_000.0, 1_500), 0.0);
        assert_eq!(feed.cap_w(60_000.0, 2_000), 33_600.0);
        assert_eq!(feed.cap_w(60_000.0, 999), 60_000.0);
    }

    #[test]
    fn a_file_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cap");
        std::fs::write(&path, "48000\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // SAFETY: geteuid() has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(trusted(&path, me), Ok(()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let e = trusted(&path, me).expect_err("world-writable");
        assert!(e.contains("chmod go-w"), "{e}");
        let e = PowerCapFeed::start(&settings(&path)).expect_err("refused at start");
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        if me == 0 {
            // Owned by someone else (uid 65534, nobody).
            std::os::unix::fs::chown(&path, Some(65534), None).expect("chown");
            let e = trusted(&path, me).expect_err("foreign owner");
            assert!(e.contains("chown"), "{e}");
        }
    }

    /// Writes within one second may keep the modification time: move it on.
    fn set_mtime_later(path: &std::path::Path, feed: &PowerCapFeed) {
        let later = feed.file.loaded_mtime().unwrap_or(std::time::SystemTime::UNIX_EPOCH) + std::time::Duration::from_secs(2);
        let f = std::fs::File::options().write(true).open(path).expect("open");
        f.set_modified(later).expect("set mtime");
    }
}

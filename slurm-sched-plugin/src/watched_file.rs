//! A site file sched/energy follows while it runs (the carbon source, the power-cap file):
//! looked at every `refresh_s`, re-read when its modification time changed, and what is wrong
//! with it logged once until it changes. What the file means, and what a feed keeps when it
//! goes bad, is the feed's ([`crate::carbon_feed`], [`crate::power_cap_feed`]).

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use crate::LOG;

/// What a look at the file found.
#[derive(Debug)]
pub enum Look {
    /// `refresh_s` has not passed since the last look, or the file did not change.
    Unchanged,
    /// Its modification time is not the one last loaded: read it again.
    Changed,
    /// Its metadata could not be read (missing, no permission).
    Unreadable(std::io::Error),
}

#[derive(Debug)]
pub struct WatchedFile {
    path: PathBuf,
    refresh_s: f64,
    last_check: Option<Instant>,
    /// The modification time of the content last loaded.
    mtime: Option<SystemTime>,
    /// What was last logged about the file being unusable.
    complaint: Option<String>,
}

impl WatchedFile {
    pub fn new(path: PathBuf, refresh_s: f64) -> WatchedFile {
        WatchedFile { path, refresh_s, last_check: None, mtime: None, complaint: None }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Counts as a look now (the next is due `refresh_s` later).
    pub fn looked(&mut self) {
        self.last_check = Some(Instant::now());
    }

    /// Looks at the file if `refresh_s` passed since the last look.
    pub fn look(&mut self) -> Look {
        if self.last_check.is_some_and(|t| t.elapsed().as_secs_f64() < self.refresh_s) {
            return Look::Unchanged;
        }
        self.looked();
        match std::fs::metadata(&self.path).and_then(|m| m.modified()) {
            Err(e) => Look::Unreadable(e),
            Ok(m) if Some(m) == self.mtime => Look::Unchanged,
            Ok(_) => Look::Changed,
        }
    }

    /// The file's modification time now (read before its content, so that a write in between
    /// is seen as a change at the next look).
    pub fn mtime_now(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.path).and_then(|m| m.modified()).ok()
    }

    /// The content of `mtime` was loaded.
    pub fn loaded(&mut self, mtime: Option<SystemTime>) {
        self.mtime = mtime;
    }

    /// Logs `text` as an error unless it is what was logged last.
    pub fn complain(&mut self, text: String) {
        if self.complaint.as_deref() != Some(text.as_str()) {
            LOG.error(&text);
            self.complaint = Some(text);
        }
    }

    /// The file is fine again: the next problem is logged whatever it is.
    pub fn clear_complaint(&mut self) {
        self.complaint = None;
    }

    pub fn complaint(&self) -> Option<&str> {
        self.complaint.as_deref()
    }

    /// Tests: the next look is due now.
    #[cfg(test)]
    pub(crate) fn expire(&mut self) {
        self.last_check = None;
    }

    /// Tests: the modification time of the content last loaded.
    #[cfg(test)]
    pub(crate) fn loaded_mtime(&self) -> Option<SystemTime> {
        self.mtime
    }
}

/// A feed that follows a [`WatchedFile`]: how it reads the file, and the words its log lines
/// use. [`start`] and [`refresh`] are the life cycle both feeds share.
pub trait FileFeed {
    type Error: std::fmt::Display;
    /// What the file is, in log lines ("carbon source").
    const WHAT: &'static str;
    /// What holds while the file was never readable ("no carbon signal").
    const UNTIL_READ: &'static str;
    /// What holds while it is unusable after a good read ("the schedule read before stays").
    const KEPT: &'static str;
    fn file(&mut self) -> &mut WatchedFile;
    /// Reads the file into the feed; on an error the feed keeps what it had.
    fn load(&mut self) -> Result<(), Self::Error>;
    /// What the last read holds, for the log ("48 values").
    fn summary(&self) -> String;
}

/// The first read, at start: a file that exists and cannot be read or parsed is an error (it
/// stops slurmctld with the reason); a missing one is logged and waited for. True when read.
pub fn start<F: FileFeed>(feed: &mut F) -> Result<bool, F::Error> {
    let read = match std::fs::metadata(feed.file().path()) {
        Ok(_) => {
            feed.load()?;
            true
        }
        Err(e) => {
            let text = format!("{} {} not readable ({e}): {} until it is", F::WHAT, feed.file().path().display(), F::UNTIL_READ);
            feed.file().complain(text);
            false
        }
    };
    feed.file().looked();
    Ok(read)
}

/// Re-reads the feed's file if `refresh_s` passed and it changed. A file that became
/// unreadable or unparsable is logged once; the feed keeps what it read before.
pub fn refresh<F: FileFeed>(feed: &mut F) {
    match feed.file().look() {
        Look::Unchanged => {}
        Look::Unreadable(e) => {
            let text = format!("{} {} not readable ({e}): {}", F::WHAT, feed.file().path().display(), F::KEPT);
            feed.file().complain(text);
        }
        Look::Changed => match feed.load() {
            Ok(()) => {
                feed.file().clear_complaint();
                let path = feed.file().path().display().to_string();
                slurm_bindings::slurm_log!(LOG, info, "{} {path} re-read: {}", F::WHAT, feed.summary());
            }
            Err(e) => feed.file().complain(format!("{}: {e}; {}", F::WHAT, F::KEPT)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn set_mtime(path: &Path, t: SystemTime) {
        std::fs::File::options().write(true).open(path).and_then(|f| f.set_modified(t)).expect("set mtime");
    }

    #[test]
    fn a_change_is_seen_once_per_refresh_and_complaints_are_logged_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let mut w = WatchedFile::new(path.clone(), 3600.0);
        assert!(matches!(w.look(), Look::Unreadable(_)), "missing");
        assert!(matches!(w.look(), Look::Unchanged), "not due again before refresh_s");
        std::fs::write(&path, "1").expect("write");
        w.expire();
        assert!(matches!(w.look(), Look::Changed));
        w.loaded(w.mtime_now());
        w.expire();
        assert!(matches!(w.look(), Look::Unchanged), "same modification time");
        set_mtime(&path, w.loaded_mtime().expect("loaded") + Duration::from_secs(2));
        w.expire();
        assert!(matches!(w.look(), Look::Changed), "a new modification time");
        w.complain("bad".into());
        assert_eq!(w.complaint(), Some("bad"));
        w.complain("bad".into());
        w.complain("worse".into());
        assert_eq!(w.complaint(), Some("worse"));
        w.clear_complaint();
        assert_eq!(w.complaint(), None);
    }
}

//! The site's carbon-intensity file, live: read at start (a file that cannot be parsed stops
//! slurmctld with the reason), looked at every `refresh_s` and re-read when its modification
//! time changed. The planner gets a signal only while the file covers the present; a missing
//! or stale file is logged once and means "no carbon signal" until it is back.

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use model::carbon::CarbonSignal;
use model::carbon_source::{CarbonSourceError, IntensitySeries, SourceFormat};
use slurm_bindings::slurm_log;

use crate::LOG;
use crate::config::CarbonSettings;

#[derive(Debug)]
pub struct CarbonFeed {
    path: PathBuf,
    format: SourceFormat,
    refresh_s: f64,
    last_check: Option<Instant>,
    mtime: Option<SystemTime>,
    signal: Option<CarbonSignal>,
    series: Option<IntensitySeries>,
    /// What was last logged about the file being unusable (logged once until it changes).
    complaint: Option<String>,
    /// The file did not cover the present at the last look (logged once).
    stale: bool,
}

impl CarbonFeed {
    /// `None` without `[carbon] source`. A file that exists but cannot be parsed is an error;
    /// a missing file is logged and waited for.
    pub fn start(settings: &CarbonSettings) -> Result<Option<CarbonFeed>, CarbonSourceError> {
        let Some(path) = settings.source.clone() else { return Ok(None) };
        let format = settings.source_format().unwrap_or(SourceFormat::Auto);
        let mut feed = CarbonFeed { path, format, refresh_s: settings.refresh_s, last_check: None, mtime: None, signal: None, series: None, complaint: None, stale: false };
        match std::fs::metadata(&feed.path) {
            Ok(_) => {
                feed.load()?;
                if let Some((a, b)) = feed.series.as_ref().and_then(IntensitySeries::span_unix_s) {
                    slurm_log!(LOG, info, "carbon source {}: {} values from {a} to {b}", feed.path.display(), feed.series.as_ref().map_or(0, |s| s.intervals().len()));
                }
            }
            Err(e) => feed.complain(format!("carbon source {} not readable ({e}): no carbon signal until it is", feed.path.display())),
        }
        feed.last_check = Some(Instant::now());
        Ok(Some(feed))
    }

    fn load(&mut self) -> Result<(), CarbonSourceError> {
        let mtime = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        let series = IntensitySeries::from_file_as(&self.path, self.format)?;
        self.signal = Some(CarbonSignal::published(series.clone()));
        self.series = Some(series);
        self.mtime = mtime;
        Ok(())
    }

    fn complain(&mut self, text: String) {
        if self.complaint.as_deref() != Some(text.as_str()) {
            LOG.error(&text);
            self.complaint = Some(text);
        }
    }

    /// Re-reads the file if `refresh_s` passed and it changed. A file that became unreadable
    /// or unparsable is logged; the values read before stay (they stop covering the present in
    /// time, and then there is no signal).
    pub fn refresh(&mut self) {
        if self.last_check.is_some_and(|t| t.elapsed().as_secs_f64() < self.refresh_s) {
            return;
        }
        self.last_check = Some(Instant::now());
        match std::fs::metadata(&self.path).and_then(|m| m.modified()) {
            Err(e) => self.complain(format!("carbon source {} not readable ({e}): the values read before are used while they cover the present", self.path.display())),
            Ok(m) if Some(m) == self.mtime => {}
            Ok(_) => match self.load() {
                Ok(()) => {
                    self.complaint = None;
                    slurm_log!(LOG, info, "carbon source {} re-read: {} values", self.path.display(), self.series.as_ref().map_or(0, |s| s.intervals().len()));
                }
                Err(e) => self.complain(format!("carbon source: {e}; the values read before are used while they cover the present")),
            },
        }
    }

    /// The signal for the planner at `now_unix_s`: `None` when the file says nothing about now.
    pub fn signal_at(&mut self, now_unix_s: i64) -> Option<CarbonSignal> {
        let covered = self.series.as_ref().and_then(|s| s.intensity_at(now_unix_s)).is_some();
        if covered && self.stale {
            self.stale = false;
            slurm_log!(LOG, info, "carbon source {}: covers the present again", self.path.display());
        }
        if !covered {
            if self.stale {
                return None;
            }
            self.stale = true;
            let end = self.series.as_ref().and_then(IntensitySeries::span_unix_s).map(|(_, b)| b);
            LOG.error(&match end {
                Some(end) => format!("carbon source {}: no value for now (its values end at {end}): no carbon signal until it is refreshed", self.path.display()),
                None => format!("carbon source {}: no values: no carbon signal", self.path.display()),
            });
            return None;
        }
        self.signal.clone()
    }

    /// Intensity (gCO2/kWh) at a unix time, if the file gives one.
    pub fn intensity_at(&self, unix_s: i64) -> Option<f64> {
        self.series.as_ref()?.intensity_at(unix_s)
    }
}

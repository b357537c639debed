//! The site's carbon-intensity file, live: read at start (a file that cannot be parsed stops
//! slurmctld with the reason), looked at every `refresh_s` and re-read when its modification
//! time changed. The planner gets a signal only while the file covers the present; a missing
//! or stale file is logged once and means "no carbon signal" until it is back.

use model::carbon::CarbonSignal;
use model::carbon_source::{CarbonSourceError, IntensitySeries, SourceFormat};
use slurm_bindings::slurm_log;

use crate::LOG;
use crate::config::CarbonSettings;
use crate::watched_file::{self, FileFeed, WatchedFile};

#[derive(Debug)]
pub struct CarbonFeed {
    file: WatchedFile,
    format: SourceFormat,
    signal: Option<CarbonSignal>,
    series: Option<IntensitySeries>,
    /// The file did not cover the present at the last look (logged once).
    stale: bool,
}

impl FileFeed for CarbonFeed {
    type Error = CarbonSourceError;
    const WHAT: &'static str = "carbon source";
    const UNTIL_READ: &'static str = "no carbon signal";
    const KEPT: &'static str = "the values read before are used while they cover the present";

    fn file(&mut self) -> &mut WatchedFile {
        &mut self.file
    }

    fn load(&mut self) -> Result<(), CarbonSourceError> {
        let mtime = self.file.mtime_now();
        let series = IntensitySeries::from_file_as(self.file.path(), self.format)?;
        self.signal = Some(CarbonSignal::published(series.clone()));
        self.series = Some(series);
        self.file.loaded(mtime);
        Ok(())
    }

    fn summary(&self) -> String {
        format!("{} values", self.series.as_ref().map_or(0, |s| s.intervals().len()))
    }
}

impl CarbonFeed {
    /// `None` without `[carbon] source`. A file that exists but cannot be parsed is an error;
    /// a missing file is logged and waited for.
    pub fn start(settings: &CarbonSettings) -> Result<Option<CarbonFeed>, CarbonSourceError> {
        let Some(path) = settings.source.clone() else { return Ok(None) };
        let format = settings.source_format().unwrap_or(SourceFormat::Auto);
        let mut feed = CarbonFeed { file: WatchedFile::new(path, settings.refresh_s), format, signal: None, series: None, stale: false };
        if watched_file::start(&mut feed)?
            && let Some((a, b)) = feed.series.as_ref().and_then(IntensitySeries::span_unix_s)
        {
            slurm_log!(LOG, info, "carbon source {}: {} from {a} to {b}", feed.file.path().display(), feed.summary());
        }
        Ok(Some(feed))
    }

    /// Re-reads the file if `refresh_s` passed and it changed. A file that became unreadable
    /// or unparsable is logged; the values read before stay (they stop covering the present in
    /// time, and then there is no signal).
    pub fn refresh(&mut self) {
        watched_file::refresh(self);
    }

    /// The signal for the planner at `now_unix_s`: `None` when the file says nothing about now.
    pub fn signal_at(&mut self, now_unix_s: i64) -> Option<CarbonSignal> {
        let covered = self.series.as_ref().and_then(|s| s.intensity_at(now_unix_s)).is_some();
        if covered && self.stale {
            self.stale = false;
            slurm_log!(LOG, info, "carbon source {}: covers the present again", self.file.path().display());
        }
        if !covered {
            if self.stale {
                return None;
            }
            self.stale = true;
            let end = self.series.as_ref().and_then(IntensitySeries::span_unix_s).map(|(_, b)| b);
            LOG.error(&match end {
                Some(end) => format!("carbon source {}: no value for now (its values end at {end}): no carbon signal until it is refreshed", self.file.path().display()),
                None => format!("carbon source {}: no values: no carbon signal", self.file.path().display()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(path: &std::path::Path) -> CarbonSettings {
        CarbonSettings { source: Some(path.to_path_buf()), format: "auto".into(), refresh_s: 1.0 }
    }

    fn now() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
    }

    #[test]
    fn no_source_no_feed() {
        assert!(CarbonFeed::start(&CarbonSettings::default()).expect("ok").is_none());
    }

    #[test]
    fn a_bad_file_at_start_is_an_error_naming_its_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ci.csv");
        std::fs::write(&path, "timestamp,g_per_kwh\n100,5\n90,4\n").expect("write");
        let e = CarbonFeed::start(&settings(&path)).unwrap_err();
        assert!(e.to_string().ends_with("ci.csv:3: timestamp not after the previous one"), "{e}");
    }

    #[test]
    fn missing_then_written_then_stale() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ci.csv");
        let mut feed = CarbonFeed::start(&settings(&path)).expect("a missing file is waited for").expect("feed");
        let t = now();
        assert!(feed.signal_at(t).is_none());
        // The cron job writes it: re-read after refresh_s.
        std::fs::write(&path, format!("{},300\n{},100\n", t - 60, t + 1740)).expect("write");
        feed.file.expire();
        feed.refresh();
        let s = feed.signal_at(t).expect("covers now");
        assert_eq!(s.intensity_at(t as f64), 300.0);
        assert_eq!(feed.intensity_at(t + 1800), Some(100.0));
        // Past the file's end (the last value holds one step): no signal.
        assert!(feed.signal_at(t + 1740 + 1800 + 1).is_none());
        // A broken rewrite keeps the values read before.
        std::fs::write(&path, "100,5\n200,lots\n").expect("write");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(later)).expect("mtime");
        feed.file.expire();
        feed.refresh();
        assert!(feed.file.complaint().is_some_and(|c| c.contains("ci.csv:2: intensity")), "{:?}", feed.file.complaint());
        assert_eq!(feed.signal_at(t).map(|s| s.intensity_at(t as f64)), Some(300.0));
    }
}

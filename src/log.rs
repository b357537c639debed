//! Logging into the daemon's own log, the way Slurm's plugins do it: every line starts with the
//! plugin's type (`sched/energy: ...`), and a debug switch (the plugin's configuration or a
//! `DebugFlags` bit, like `DebugFlags=Backfill` for sched/backfill) raises debug lines to info
//! level so they show without turning the whole daemon to `debug`.
//!
//! Outside a Slurm daemon (tests, tools) lines go to stderr.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys;

/// Can lines go to the daemon's log? Once either Slurm table is resolved (the node-side plugins
/// resolve theirs in `init`).
fn log_ready() -> bool {
    // SAFETY: reads a flag of the shim.
    let ready = unsafe { sys::energy_log_ready() };
    ready || crate::api::api().is_ok()
}

/// Slurm's log levels that plugins use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Info,
    Verbose,
    Debug,
    Debug2,
}

impl Level {
    fn raw(self) -> i32 {
        (match self {
            Level::Error => sys::LOG_LEVEL_ERROR,
            Level::Info => sys::LOG_LEVEL_INFO,
            Level::Verbose => sys::LOG_LEVEL_VERBOSE,
            Level::Debug => sys::LOG_LEVEL_DEBUG,
            Level::Debug2 => sys::LOG_LEVEL_DEBUG2,
        }) as i32
    }
}

/// A plugin's logger. Meant to live in a `static`.
pub struct Logger {
    prefix: &'static str,
    debug: AtomicBool,
}

impl Logger {
    pub const fn new(prefix: &'static str) -> Logger {
        Logger { prefix, debug: AtomicBool::new(false) }
    }

    /// Runs a plugin entry point's body so that no panic reaches the daemon: a panic becomes an
    /// error line (`<prefix>: <entry>: internal error (panic: ...); ignored`) and `on_panic`.
    pub fn guarded<T>(&self, entry: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(v) => v,
            Err(panic) => {
                self.error(&format!("{entry}: internal error (panic: {}); ignored", panic_text(&*panic)));
                on_panic
            }
        }
    }

    /// Log debug lines at info level (the plugin's debug switch).
    pub fn set_debug(&self, on: bool) {
        self.debug.store(on, Ordering::Relaxed);
    }

    pub fn debug_enabled(&self) -> bool {
        self.debug.load(Ordering::Relaxed)
    }

    /// Would a line at `level` reach the log? Lets callers skip building expensive messages.
    pub fn enabled(&self, level: Level) -> bool {
        if level >= Level::Debug && self.debug_enabled() {
            return true;
        }
        if !log_ready() {
            return level <= Level::Info;
        }
        // SAFETY: reads the daemon's log level through the resolved table; no arguments.
        unsafe { sys::energy_log_level() >= level.raw() }
    }

    pub fn log(&self, level: Level, msg: &str) {
        let (level, tag) = match level {
            Level::Debug | Level::Debug2 if self.debug_enabled() => (Level::Info, "debug: "),
            other => (other, ""),
        };
        let line = format!("{}: {tag}{msg}", self.prefix);
        if !log_ready() {
            if level <= Level::Info {
                eprintln!("{line}");
            }
            return;
        }
        let line = CString::new(line.replace('\0', "?")).unwrap_or_default();
        // SAFETY: `line` is a valid NUL-terminated string that outlives the call; the shim
        // passes it to log_var() as a "%s" argument, never as a format.
        unsafe { sys::energy_log(level.raw(), line.as_ptr()) }
    }

    pub fn error(&self, msg: &str) {
        self.log(Level::Error, msg)
    }
    pub fn info(&self, msg: &str) {
        self.log(Level::Info, msg)
    }
    pub fn verbose(&self, msg: &str) {
        self.log(Level::Verbose, msg)
    }
    pub fn debug(&self, msg: &str) {
        self.log(Level::Debug, msg)
    }
}

/// `slurm_log!(LOGGER, info, "x = {}", x)`: formats only when the line would be logged.
#[macro_export]
macro_rules! slurm_log {
    ($logger:expr, error, $($arg:tt)*) => { $logger.error(&format!($($arg)*)) };
    ($logger:expr, info, $($arg:tt)*) => { $logger.info(&format!($($arg)*)) };
    ($logger:expr, verbose, $($arg:tt)*) => {
        if $logger.enabled($crate::log::Level::Verbose) { $logger.verbose(&format!($($arg)*)) }
    };
    ($logger:expr, debug, $($arg:tt)*) => {
        if $logger.enabled($crate::log::Level::Debug) { $logger.debug(&format!($($arg)*)) }
    };
}

/// The message of a caught panic (`&str` or `String` payload), for a log line.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown payload".to_string())
}

/// Where lines of the `log` facade end up: a plugin's [`Logger`], or another sink (the SPANK
/// plugin logs through `slurm_info`/`slurm_error` of whatever process loaded it).
pub trait Sink: Send + Sync {
    fn enabled(&self, level: Level) -> bool;
    fn write(&self, level: Level, msg: &str);
}

impl Sink for Logger {
    fn enabled(&self, level: Level) -> bool {
        Logger::enabled(self, level)
    }
    fn write(&self, level: Level, msg: &str) {
        self.log(level, msg)
    }
}

/// Slurm's level for a `log` level. Slurm has no separate warning level for plugins: its own
/// `warning()` logs at info with a `warning: ` tag, and so does this.
fn slurm_level(level: log::Level) -> (Level, &'static str) {
    match level {
        log::Level::Error => (Level::Error, ""),
        log::Level::Warn => (Level::Info, "warning: "),
        log::Level::Info => (Level::Info, ""),
        log::Level::Debug => (Level::Debug, ""),
        log::Level::Trace => (Level::Debug2, ""),
    }
}

/// The `log` facade's logger in a plugin: the library crates (model/, gpu-control/) log through
/// `log::info!` etc. and their lines reach the daemon's log with the plugin's prefix. Debug and
/// trace lines name the module they come from (`gpu/nvml: gpu_control::arbiter: ...`).
pub struct Bridge {
    sink: &'static dyn Sink,
}

impl log::Log for Bridge {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        self.sink.enabled(slurm_level(meta.level()).0)
    }

    fn log(&self, record: &log::Record) {
        let (level, tag) = slurm_level(record.level());
        if !self.sink.enabled(level) {
            return;
        }
        let msg = if record.level() >= log::Level::Debug {
            format!("{tag}{}: {}", record.target(), record.args())
        } else {
            format!("{tag}{}", record.args())
        };
        self.sink.write(level, &msg);
    }

    fn flush(&self) {}
}

/// Installs the bridge to `sink` as this library's `log` logger (each plugin is its own shared
/// object with its own copy of the facade, so each plugin installs one). A second call (a plugin
/// initialised again in the same process) keeps the first: it points at the same sink.
pub fn install_bridge(sink: &'static dyn Sink) {
    if log::set_boxed_logger(Box::new(Bridge { sink })).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}

#[cfg(test)]
mod bridge_tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder {
        lines: Mutex<Vec<(Level, String)>>,
    }

    impl Sink for Recorder {
        fn enabled(&self, level: Level) -> bool {
            level <= Level::Debug
        }
        fn write(&self, level: Level, msg: &str) {
            if let Ok(mut lines) = self.lines.lock() {
                lines.push((level, msg.to_string()));
            }
        }
    }

    static RECORDER: Recorder = Recorder { lines: Mutex::new(Vec::new()) };

    #[test]
    fn facade_lines_reach_the_sink_at_slurm_levels() {
        install_bridge(&RECORDER);
        log::warn!(target: "gpu_control::arbiter", "clock restore failed on GPU {}", 2);
        log::debug!(target: "model::predictor", "fitted {} curves", 3);
        log::trace!(target: "model::predictor", "dropped: below the sink's level");
        let lines = RECORDER.lines.lock().map(|l| l.clone()).unwrap_or_default();
        assert_eq!(
            lines,
            vec![
                (Level::Info, "warning: clock restore failed on GPU 2".to_string()),
                (Level::Debug, "model::predictor: fitted 3 curves".to_string()),
            ]
        );
    }
}

//! The one error type of the harness. Every variant that concerns a daemon carries the tail of
//! its log, so a failing test says why without anyone having to keep the temp dir.

use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub enum ClusterError {
    /// The harness cannot run here at all (not root, a program missing, ...).
    Unsupported(String),
    /// A file or process operation of the harness itself failed.
    Io { context: String, source: io::Error },
    /// A daemon exited, or never became ready, while the cluster was starting.
    DaemonFailed {
        daemon: String,
        reason: String,
        log_tail: String,
    },
    /// Something did not happen within its time bound.
    Timeout { what: String, detail: String },
    /// A client command (sbatch, sacct, ...) failed.
    Command {
        command: String,
        status: String,
        output: String,
    },
    /// A client command printed something the harness could not read.
    Parse { what: String, output: String },
    /// Stopping left a process behind or the temp dir could not be removed.
    Stop { reason: String, base_dir: PathBuf },
}

impl ClusterError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ClusterError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Unsupported(why) => {
                write!(f, "local Slurm cluster not supported here: {why}")
            }
            ClusterError::Io { context, source } => write!(f, "{context}: {source}"),
            ClusterError::DaemonFailed {
                daemon,
                reason,
                log_tail,
            } => {
                write!(
                    f,
                    "{daemon} failed: {reason}\n--- tail of {daemon}'s log ---\n{log_tail}"
                )
            }
            ClusterError::Timeout { what, detail } => {
                write!(f, "timed out waiting for {what}\n{detail}")
            }
            ClusterError::Command {
                command,
                status,
                output,
            } => {
                write!(f, "`{command}` failed ({status}):\n{output}")
            }
            ClusterError::Parse { what, output } => write!(f, "cannot read {what} from:\n{output}"),
            ClusterError::Stop { reason, base_dir } => {
                write!(
                    f,
                    "stopping the cluster in {}: {reason}",
                    base_dir.display()
                )
            }
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

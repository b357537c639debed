//! A private munged (own key, own socket, no cluster) for tests that sign and check
//! credentials: `PrivateMunged::start()` runs munged in the foreground as our child and
//! returns once it answers; dropping it stops that child (by its pid) and removes its files.
//!
//! The directory is 0755 under the temp dir, so that a test can also run munge's clients as an
//! unprivileged user (`runuser -u nobody -- munge --socket=...`) against the same munged.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::find_program;

pub struct PrivateMunged {
    dir: tempfile::TempDir,
    child: Child,
}

impl PrivateMunged {
    /// `Ok(None)`: munged is not installed (the caller skips, saying so).
    pub fn start() -> Result<Option<PrivateMunged>, String> {
        let Some(munged) = find_program("munged") else { return Ok(None) };
        let dir = tempfile::Builder::new().prefix("private-munged-").tempdir().map_err(|e| format!("temp dir: {e}"))?;
        // munged wants a socket directory others may enter but not write.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(|e| format!("chmod: {e}"))?;
        let key = dir.path().join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").map_err(|e| format!("/dev/urandom: {e}"))?, &mut bytes)
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        std::fs::write(&key, &bytes).map_err(|e| format!("{}: {e}", key.display()))?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).map_err(|e| format!("chmod key: {e}"))?;
        let p = |name: &str| dir.path().join(name).display().to_string();
        let child = Command::new(munged)
            .arg("--foreground")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", p("munge.socket")))
            .arg(format!("--pid-file={}", p("munged.pid")))
            .arg(format!("--log-file={}", p("munged.log")))
            .arg(format!("--seed-file={}", p("munged.seed")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("console")).map_err(|e| format!("console: {e}"))?)
            .spawn()
            .map_err(|e| format!("start munged: {e}"))?;
        let mut m = PrivateMunged { dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.socket().exists() {
            if let Ok(Some(status)) = m.child.try_wait() {
                return Err(format!("munged exited ({status}): {}", std::fs::read_to_string(m.dir.path().join("console")).unwrap_or_default()));
            }
            if Instant::now() > deadline {
                return Err("munged did not create its socket in 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(m))
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("munge.socket")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivateMunged {
    fn drop(&mut self) {
        // Our own child, not yet reaped: its pid is still ours to signal.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

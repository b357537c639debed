//! Writing the power cap file: atomically (temp file in the same directory + rename), mode 0644,
//! never group- or other-writable (sched/energy refuses such a file).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The file's cap lines without the first line's time (which is "now" at each poll) and without
/// comments: two files with equal keys say the same from their writing on.
pub fn schedule_key(text: &str) -> Vec<String> {
    let mut key = Vec::new();
    for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
        if key.is_empty() {
            key.push(line.split_once(',').map_or(line, |(_, cap)| cap).to_string());
        } else {
            key.push(line.to_string());
        }
    }
    key
}

/// Replaces `path` with `text` atomically; mode 0644.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| format!("cap file {}: not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp.{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        // The umask may only clear bits; set 0644 exactly so that a umask of 0 cannot make it
        // group/other-writable and a strict one does not hide it from slurmctld.
        f.set_permissions(fs::Permissions::from_mode(0o644)).map_err(|e| format!("cannot chmod {}: {e}", tmp.display()))?;
        f.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        f.sync_all().map_err(|e| format!("cannot sync {}: {e}", tmp.display()))?;
        fs::rename(&tmp, path).map_err(|e| format!("cannot rename {} to {}: {e}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_ignores_the_first_time_and_comments() {
        let a = "# written at 1\n2026-11-27T18:00:00Z,42000\n2026-11-27T20:00:00Z,none\n";
        let b = "# written at 2\n2026-11-27T18:05:00Z,42000\n2026-11-27T20:00:00Z,none\n";
        assert_eq!(schedule_key(a), schedule_key(b));
        assert_ne!(schedule_key(a), schedule_key("2026-11-27T18:00:00Z,42000\n2026-11-27T21:00:00Z,none\n"));
    }

    #[test]
    fn written_atomically_with_mode_0644() {
        let dir = std::env::temp_dir().join(format!("openadr-ven-capfile-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("power-cap");
        fs::write(&path, "old\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        write_atomic(&path, "2026-11-27T18:00:00Z,42000\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "2026-11-27T18:00:00Z,42000\n");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temp file left");
        model::power_cap::CapSchedule::from_file(&path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! Failpoints: where a test kills the gateway, to prove a crash window is survived. `MEDIAGATE_FAILPOINT=NAME`
//! makes the process SIGKILL itself when it reaches the point `NAME`: no destructor, flush or exit hook runs,
//! as with a kill from outside or a power cut.

/// Kills the process here if `MEDIAGATE_FAILPOINT` names `point`.
pub fn reached(point: &str) {
    if std::env::var("MEDIAGATE_FAILPOINT").is_ok_and(|f| f == point) {
        // The shell's own `kill`, so no binary beyond `sh` is needed (and no `unsafe` for libc's).
        let pid = std::process::id();
        let _ = std::process::Command::new("sh").args(["-c", &format!("kill -KILL {pid}")]).status();
        // Unreachable once the signal lands; should `sh` be missing, still no way past the point.
        std::process::abort();
    }
}

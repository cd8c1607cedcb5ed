//! Test harness: starts the real `mediagate demo` binary (gateway plus simulator, real store on disk) on a
//! loopback port and talks HTTP to it.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KEY: &str = "test-key-0123456789";

/// A running demo process; killed when dropped.
pub struct Demo {
    pub base: String,
    pub data_dir: PathBuf,
    child: Child,
    _tmp: Option<tempfile::TempDir>,
}

impl Demo {
    /// Starts on a fresh data dir with fast simulated jobs.
    pub fn start() -> Demo {
        let tmp = tempfile::tempdir().unwrap();
        let mut demo = Demo::start_in(tmp.path(), "127.0.0.1:0", 0.05);
        demo._tmp = Some(tmp);
        demo
    }

    /// Starts on `data_dir` (kept by the caller), listening on `listen`.
    pub fn start_in(data_dir: &Path, listen: &str, time_scale: f64) -> Demo {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mediagate"))
            .args(["demo", "--listen", listen, "--api-key", KEY, "--time-scale", &time_scale.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .env("MEDIAGATE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().unwrap().unwrap();
        let base = first.split_whitespace().find(|w| w.starts_with("http://")).unwrap().to_string();
        std::thread::spawn(move || for _ in lines {});
        let demo = Demo { base, data_dir: data_dir.to_path_buf(), child, _tmp: None };
        demo.wait_ready();
        demo
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = ureq::get(&format!("{}/readyz", self.base)).call()
                && r.status() == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("demo did not become ready");
    }

    /// SIGKILL: no shutdown hook runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn post(&self, path: &str, body: &Value) -> Reply {
        self.request("POST", path, Some(body), &[("Authorization", &format!("Bearer {KEY}"))])
    }

    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, None, &[("Authorization", &format!("Bearer {KEY}"))])
    }

    /// Any request, with exactly the headers given.
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>, headers: &[(&str, &str)]) -> Reply {
        let text = body.map(|b| b.to_string());
        self.raw(method, path, text.as_deref(), "application/json", headers)
    }

    pub fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let url = self.url(path);
        let response = match (method, body) {
            ("GET", _) => {
                let mut r = agent.get(&url);
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                r.call()
            }
            (_, body) => {
                let mut r = agent.post(&url).header("Content-Type", content_type);
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                r.send(body.unwrap_or("").as_bytes())
            }
        };
        let mut response = response.unwrap();
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let bytes = response.body_mut().read_to_vec().unwrap();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply { status, headers, json, bytes }
    }

    /// Polls a task until it is terminal.
    pub fn wait_terminal(&self, task_id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let reply = self.get(&format!("/v1/tasks/{task_id}"));
            let status = reply.json["status"].as_str().unwrap_or_default().to_string();
            if ["success", "failed", "timeout", "cancelled"].contains(&status.as_str()) {
                return reply.json;
            }
            assert!(Instant::now() < deadline, "task {task_id} still {status}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub json: Value,
    pub bytes: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or_default()
    }

    pub fn param(&self) -> &str {
        self.json["error"]["param"].as_str().unwrap_or_default()
    }
}

/// Every example request: `(file stem, body)`.
pub fn examples() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/requests");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            (stem, serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

//! Test harness: starts the real `mediagate demo` binary (gateway plus simulator, real store on disk) on a
//! loopback port and talks HTTP to it.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KEY: &str = "test-key-0123456789";
pub const ADMIN_TOKEN: &str = "test-admin-token";

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
        Demo::start_with(data_dir, listen, time_scale, "", &[])
    }

    /// Starts with extra config YAML and environment.
    pub fn start_with(data_dir: &Path, listen: &str, time_scale: f64, config: &str, env: &[(&str, &str)]) -> Demo {
        std::fs::create_dir_all(data_dir).unwrap();
        let config_path = data_dir.join("test-config.yaml");
        std::fs::write(&config_path, if config.is_empty() { "{}" } else { config }).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_mediagate"));
        command
            .args(["demo", "--listen", listen, "--api-key", KEY, "--time-scale", &time_scale.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--config")
            .arg(&config_path)
            .env("MEDIAGATE_LOG", "warn")
            .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
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

    /// A call of the admin API.
    pub fn admin(&self, path: &str, body: Option<&Value>) -> Reply {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let method = if body.is_some() { "POST" } else { "GET" };
        self.request(method, &format!("/admin/v1{path}"), body, &[("Authorization", auth.as_str())])
    }

    /// A new account with a key and the given funds (micro-units); returns the key.
    pub fn account(&self, name: &str, balance: i64, trial: i64, plan: i64) -> String {
        assert_eq!(self.admin("/accounts", Some(&serde_json::json!({"name": name}))).status, 201);
        if balance > 0 {
            assert_eq!(
                self.admin(&format!("/accounts/{name}/top-up"), Some(&serde_json::json!({"amount": balance}))).status,
                200
            );
        }
        if trial > 0 {
            assert_eq!(
                self.admin(&format!("/accounts/{name}/free-trial"), Some(&serde_json::json!({"amount": trial}))).status,
                200
            );
        }
        if plan > 0 {
            let body = serde_json::json!({"name": "test", "allowance": plan});
            assert_eq!(self.admin(&format!("/accounts/{name}/plan"), Some(&body)).status, 200);
        }
        let key = self.admin(&format!("/accounts/{name}/keys"), Some(&serde_json::json!({})));
        key.json["key"].as_str().unwrap().to_string()
    }

    /// `(free_trial, plan, balance)` of an account.
    pub fn funds(&self, name: &str) -> (i64, i64, i64) {
        let f = &self.admin(&format!("/accounts/{name}"), None).json["funds"];
        (f["free_trial"].as_i64().unwrap(), f["plan"].as_i64().unwrap(), f["balance"].as_i64().unwrap())
    }

    /// POST with another account's key.
    pub fn post_as(&self, key: &str, path: &str, body: &Value) -> Reply {
        self.request("POST", path, Some(body), &[("Authorization", &format!("Bearer {key}"))])
    }

    pub fn get_as(&self, key: &str, path: &str) -> Reply {
        self.request("GET", path, None, &[("Authorization", &format!("Bearer {key}"))])
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
        self.wait_terminal_as(KEY, task_id, timeout)
    }

    pub fn wait_terminal_as(&self, key: &str, task_id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let reply = self.get_as(key, &format!("/v1/tasks/{task_id}"));
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

/// The endpoint path of a model, from `GET /v1/models`.
pub fn endpoint_of(demo: &Demo, model: &str) -> String {
    demo.get(&format!("/v1/models/{model}")).json["endpoint"].as_str().unwrap().to_string()
}

/// A free loopback port.
pub fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
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

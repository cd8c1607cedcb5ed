//! Test harness: starts the real `mediagate` binary (`demo`: gateway plus simulator, or `serve` beside a
//! `simulate` process; a real store on disk) on a loopback port and talks HTTP to it.
#![allow(dead_code, clippy::unwrap_used)]

pub mod postgres;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const KEY: &str = "test-key-0123456789";
pub const ADMIN_TOKEN: &str = "test-admin-token";

/// A running `mediagate` process; killed when dropped.
pub struct Process {
    pub child: Child,
    /// What it printed on stdout, line by line, as it went.
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// What it printed on stderr so far.
    pub stderr: Arc<Mutex<String>>,
}

impl Process {
    /// Runs `mediagate ARGS` with `env` added, and waits for its first line on stdout (every long-running
    /// command prints its address first).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Process {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mediagate"));
        command.args(args).envs(env.iter().copied());
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let (stdout, stderr) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(String::new())));
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let collected = stdout.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                collected.lock().unwrap().push(line);
                let _ = first_tx.send(());
            }
        });
        let mut err = child.stderr.take().unwrap();
        let collected = stderr.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = err.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                collected.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut process = Process { child, stdout, stderr };
        if first_rx.recv_timeout(Duration::from_secs(20)).is_err() {
            process.kill();
            panic!("mediagate {args:?} printed nothing; stderr: {}", process.stderr());
        }
        process
    }

    /// The first stdout word starting with `http`: the address it serves.
    pub fn address(&self) -> String {
        let lines = self.stdout.lock().unwrap();
        lines[0].split_whitespace().find(|w| w.starts_with("http")).unwrap().to_string()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL: no shutdown hook runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running gateway (`demo` or `serve`) and the address to reach it.
pub struct Demo {
    pub base: String,
    pub data_dir: PathBuf,
    pub process: Process,
    /// The HTTP client of every call; [`Demo::trust`] makes it verify a TLS listener.
    agent: ureq::Agent,
    _tmp: Option<tempfile::TempDir>,
}

/// The config's `store` section when the suite runs on PostgreSQL (a database of its own per data dir), else
/// nothing: the embedded store in the data dir.
fn store_config(data_dir: &Path) -> String {
    if !postgres::suite_on_postgres() {
        return String::new();
    }
    format!("store:\n  url: {}\n", postgres::database_for(data_dir))
}

/// A client that reports every status as an answer; over https it trusts only `ca`.
pub fn agent(ca: Option<&Path>) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder().http_status_as_error(false);
    if let Some(ca) = ca {
        let roots = mediagate::support::tls::read_certificates(ca).unwrap();
        let roots = roots.iter().map(|c| ureq::tls::Certificate::from_der(c).to_owned()).collect();
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .provider(ureq::tls::TlsProvider::Rustls)
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
                .unversioned_rustls_crypto_provider(mediagate::support::tls::provider())
                .build(),
        );
    }
    config.build().into()
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
        Demo::start_flags(data_dir, listen, time_scale, config, env, &[])
    }

    /// Starts with extra config YAML, environment and flags of `mediagate demo`.
    pub fn start_flags(
        data_dir: &Path,
        listen: &str,
        time_scale: f64,
        config: &str,
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Demo {
        let config = format!("{config}\n{}", store_config(data_dir));
        Demo::launch(data_dir, listen, time_scale, &config, env, flags)
    }

    /// Starts on the embedded store whichever store the suite runs on, for tests of the store in the data dir.
    pub fn start_embedded() -> Demo {
        let tmp = tempfile::tempdir().unwrap();
        let mut demo = Demo::start_embedded_with(tmp.path(), "127.0.0.1:0", 0.05, "", &[]);
        demo._tmp = Some(tmp);
        demo
    }

    /// [`Demo::start_with`] on the embedded store, whichever store the suite runs on.
    pub fn start_embedded_with(
        data_dir: &Path,
        listen: &str,
        time_scale: f64,
        config: &str,
        env: &[(&str, &str)],
    ) -> Demo {
        Demo::launch(data_dir, listen, time_scale, config, env, &[])
    }

    fn launch(
        data_dir: &Path,
        listen: &str,
        time_scale: f64,
        config: &str,
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Demo {
        std::fs::create_dir_all(data_dir).unwrap();
        let config_path = data_dir.join("test-config.yaml");
        std::fs::write(&config_path, if config.trim().is_empty() { "{}" } else { config }).unwrap();
        let time_scale_arg = time_scale.to_string();
        let (data, config_arg) = (data_dir.display().to_string(), config_path.display().to_string());
        let args = ["demo", "--listen", listen, "--api-key", KEY, "--time-scale", &time_scale_arg];
        let args: Vec<&str> = args
            .into_iter()
            .chain(["--data-dir", &data, "--config", &config_arg])
            .chain(flags.iter().copied())
            .collect();
        let mut all_env = vec![("MEDIAGATE_LOG", "warn"), ("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)];
        all_env.extend_from_slice(env);
        Demo::ready(Process::spawn(&args, &all_env), data_dir)
    }

    /// `mediagate serve` on `data_dir` with `config` (YAML; `listen` and `data_dir` are set here) and `env`.
    pub fn serve(data_dir: &Path, config: &str, env: &[(&str, &str)]) -> Demo {
        std::fs::create_dir_all(data_dir).unwrap();
        let config_path = data_dir.join("serve-config.yaml");
        let store = if config.contains("store:") { String::new() } else { store_config(data_dir) };
        let config = format!("listen: 127.0.0.1:0\ndata_dir: {}\n{config}\n{store}", data_dir.display());
        std::fs::write(&config_path, config).unwrap();
        let mut all_env = vec![("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)];
        all_env.extend_from_slice(env);
        let config_arg = config_path.display().to_string();
        Demo::ready(Process::spawn(&["serve", "--config", &config_arg], &all_env), data_dir)
    }

    /// Waits for the process's `/readyz` (over plain HTTP: a TLS listener is waited for by its caller).
    fn ready(process: Process, data_dir: &Path) -> Demo {
        let base = process.address();
        let demo = Demo { base, data_dir: data_dir.to_path_buf(), process, agent: agent(None), _tmp: None };
        if demo.base.starts_with("http://") {
            demo.wait_ready();
        }
        demo
    }

    /// Verifies a TLS listener against `ca` from now on, and waits for it to be ready.
    pub fn trust(&mut self, ca: &Path) {
        self.agent = agent(Some(ca));
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = self.agent.get(&format!("{}/readyz", self.base)).call()
                && r.status() == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the gateway did not become ready; stderr: {}", self.process.stderr());
    }

    /// SIGKILL: no shutdown hook runs.
    pub fn kill(&mut self) {
        self.process.kill();
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
        let name = path_segment(name);
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

    /// What the usage log charged `account` in all.
    pub fn charged(&self, account: &str) -> i64 {
        let usage = self.admin(&format!("/usage?account={}", path_segment(account)), None);
        std::str::from_utf8(&usage.bytes)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap()["charged"].as_i64().unwrap())
            .sum()
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
        self.try_raw(method, path, body, content_type, headers).unwrap()
    }

    /// Any request; `Err` when no answer came (a refused connection, a closed one).
    pub fn try_raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Result<Reply, ureq::Error> {
        let agent = &self.agent;
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
        let mut response = response?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
            .collect();
        let bytes = response.body_mut().read_to_vec()?;
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Reply { status, headers, json, bytes })
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
            if Instant::now() > deadline {
                let log = self.process.stderr();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                panic!(
                    "task {task_id} still {status}: {}; the gateway's last log lines, newest first: {tail:#?}",
                    reply.json
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// `text` as one URL path segment: everything but letters, digits and `-._~` percent-encoded.
pub fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The environment variable [`serve_config`] names for the simulator's `cn-beijing` key, and that key.
pub const SIM_KEY: (&str, &str) = ("TEST_SIM_KEY", "k-cn-beijing");

/// `mediagate simulate` alone on a free loopback port, jobs at `time_scale`, keys `k-<region>`, with
/// `flags` added.
pub fn simulator(time_scale: &str, flags: &[&str]) -> Process {
    let args = ["simulate", "--listen", "127.0.0.1:0", "--time-scale", time_scale, "--key-prefix", "k"];
    Process::spawn(&[&args[..], flags].concat(), &[("MEDIAGATE_LOG", "warn")])
}

/// A `serve` config whose `cn-beijing` upstream is the simulator at `base` (`upstream` adds to its entry,
/// e.g. `, timeout_seconds: 1`), with a quick poller and the `extra` lines.
pub fn serve_config(base: &str, upstream: &str, extra: &str) -> String {
    format!(
        "{extra}upstreams:\n  cn-beijing: {{base_url: {base}/cn-beijing, api_key_env: {}{upstream}}}\n\
         poller: {{min_interval_ms: 50, max_interval_ms: 200, sweep_interval_ms: 50}}\n",
        SIM_KEY.0
    )
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

/// `GET url` as JSON (any status).
pub fn get_json(url: &str) -> Value {
    let agent = agent(None);
    agent.get(url).call().unwrap().body_mut().read_json().unwrap_or(Value::Null)
}

/// Now, in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A request an [`http_receiver`] took: its path, headers (names lower-cased) and body.
pub struct Request {
    pub path: String,
    pub headers: std::collections::HashMap<String, String>,
    pub body: Vec<u8>,
}

/// A plain HTTP/1.1 server on a loopback port, for the gateway's outgoing calls the tests receive (webhook
/// deliveries, OTLP exports): each request, one after another on a kept-alive connection, goes to `answer`,
/// whose status is answered with an empty body. Returns the server's address (`host:port`).
pub fn http_receiver(answer: impl Fn(Request) -> u16 + Send + Sync + 'static) -> String {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
                    let mut headers = std::collections::HashMap::new();
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap();
                        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
                    }
                    let length: usize = headers.get("content-length").map_or(0, |l| l.parse().unwrap());
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let status = answer(Request { path, headers, body });
                    let reply = format!("HTTP/1.1 {status} Answer\r\ncontent-length: 0\r\n\r\n");
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

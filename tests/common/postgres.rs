//! Real PostgreSQL for the tests: a throwaway cluster (initdb in a temp dir, a loopback port, run as a
//! non-root user when the tests run as root), or the server `MEDIAGATE_TEST_DATABASE_URL` names, on which
//! each test gets databases of its own.
//!
//! `MEDIAGATE_TEST_STORE=postgres` runs the whole suite on PostgreSQL: every gateway the harness starts gets
//! a database of its own (one per data dir, so a restart finds its state again).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Whether the suite runs on PostgreSQL (`MEDIAGATE_TEST_STORE=postgres`).
pub fn suite_on_postgres() -> bool {
    std::env::var("MEDIAGATE_TEST_STORE").is_ok_and(|store| store == "postgres")
}

/// A server the tests may create databases on: the one `MEDIAGATE_TEST_DATABASE_URL` names (its maintenance
/// database, e.g. `postgres://user:pw@host:5432/postgres`), else a cluster started once per test binary.
pub fn shared_server() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("MEDIAGATE_TEST_DATABASE_URL") {
            return url;
        }
        // Started from a thread that lives as long as the process: the server dies with its parent thread.
        let (sent, url) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let cluster = Cluster::start();
            sent.send(cluster.url("postgres")).unwrap();
            let _kept = cluster;
            loop {
                std::thread::park();
            }
        });
        url.recv().unwrap()
    })
}

/// A database of its own for `data_dir` on the shared server (created on first use): its URL.
pub fn database_for(data_dir: &Path) -> String {
    let server = shared_server();
    let digest = mediagate::domain::tasks::hash_key(&data_dir.display().to_string());
    let name = format!("mg_{}", hex::encode(&digest[..8]));
    sql(server, &format!("CREATE DATABASE {name}"), true);
    with_database(server, &name)
}

/// `url` with its database name replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (server, _) = url.rsplit_once('/').unwrap();
    format!("{server}/{name}")
}

/// Runs `statement` on `url`; an error fails the test unless `may_exist` and it says the object exists.
pub fn sql(url: &str, statement: &str, may_exist: bool) {
    query(url, statement).map(drop).unwrap_or_else(|e| {
        assert!(may_exist && e.contains("already exists"), "{statement}: {e}");
    })
}

/// The rows `statement` returns on `url`, each as text columns.
pub fn query(url: &str, statement: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (client, connection) =
            tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let messages = client.simple_query(statement).await.map_err(|e| format!("{e:?}"))?;
        Ok(messages
            .into_iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some((0..row.len()).map(|i| row.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect())
    })
}

/// A PostgreSQL cluster in a temp dir on a loopback port, stopped and removed when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    pub port: u16,
    bin: PathBuf,
    /// Who it runs as when the tests run as root (PostgreSQL refuses to).
    user: Option<(u32, u32)>,
    server: Mutex<Option<Child>>,
}

impl Cluster {
    /// initdb, then start.
    pub fn start() -> Cluster {
        let bin = binaries();
        let dir = tempfile::tempdir().unwrap();
        let user = run_as();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-D"]).arg(&data);
        let out = as_user(&mut initdb, user).output().unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port: u16 = super::free_port().rsplit(':').next().unwrap().parse().unwrap();
        let cluster = Cluster { dir, port, bin, user, server: Mutex::new(None) };
        cluster.resume();
        cluster
    }

    /// `postgres://postgres@127.0.0.1:PORT/NAME`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Starts the server (again) and waits until it takes connections.
    pub fn resume(&self) {
        let data = self.dir.path().join("data");
        // setpriv: the server goes when the thread that started it does, even if the test binary is killed.
        let mut postgres = Command::new("setpriv");
        postgres
            .args(["--pdeathsig", "KILL", "--"])
            .arg(self.bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"])
            .args(["-c", "shared_buffers=64MB", "-c"])
            .arg(format!("unix_socket_directories={}", self.dir.path().display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = as_user(&mut postgres, self.user).spawn().unwrap();
        *self.server.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while query(&self.url("postgres"), "SELECT 1").is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not start on port {}", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (a fast shutdown: sessions are cut, what was committed stays).
    pub fn stop(&self) {
        if let Some(mut child) = self.server.lock().unwrap().take() {
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.lock().unwrap().take() {
            let _ = Command::new("kill").args(["-QUIT", &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }
}

/// Where initdb and postgres are: on PATH, else Debian's `/usr/lib/postgresql/<version>/bin` (newest).
fn binaries() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file());
    let debian = || {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file())
            .collect();
        versions.sort_by_key(|bin| bin.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()));
        versions.pop()
    };
    on_path.or_else(debian).unwrap_or_else(|| {
        panic!(
            "PostgreSQL 15 or newer is needed for these tests: install it (Debian: apt-get install postgresql), \
             or set MEDIAGATE_TEST_DATABASE_URL to a server the tests may create databases on"
        )
    })
}

/// The user to run PostgreSQL as when the tests run as root: `postgres` if it exists, else `nobody`.
fn run_as() -> Option<(u32, u32)> {
    let out = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&out.stdout).trim() != "0" {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let entry = |name: &str| {
        passwd
            .lines()
            .map(|line| line.split(':').collect::<Vec<_>>())
            .find(|fields| fields[0] == name)
            .map(|f| (f[2].parse().unwrap(), f[3].parse().unwrap()))
    };
    entry("postgres").or_else(|| entry("nobody")).or_else(|| panic!("no user to run PostgreSQL as"))
}

fn as_user(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

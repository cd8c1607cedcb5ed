//! The PostgreSQL scenario: one replica on a local PostgreSQL (a throwaway cluster started here, default
//! settings, durable commits), its async submissions and sync requests per second, and side by side in the
//! same run pgbench running the statements each of those requests commits, as a custom script on the same
//! database: the database's ceiling for this work done one request per transaction. The gateway shares
//! transactions between concurrent requests (group commit), so the goal is three times that ceiling.

use crate::harness::{
    ADMIN_ENV, ROUNDS, UNCAPPED, UPSTREAM_KEY_ENV, free_port, gateway_config, http, median, met, start,
};
use crate::loadgen::{Request, saturate};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Clients at once, for the gateway and for pgbench alike: each side's best of these.
const CONNECTIONS: [usize; 3] = [16, 64, 256];
const SECONDS: u64 = 4;

/// A cluster in a temp dir, run as `postgres` when the bench runs as root; killed when dropped.
pub(crate) struct Cluster {
    dir: PathBuf,
    port: u16,
    server: Child,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.server.id().to_string()]).status();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn postgres_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().unwrap_or_else(|| panic!("PostgreSQL is not installed (Debian: apt-get install postgresql)"))
}

/// `command` as the `postgres` user when running as root (PostgreSQL refuses root).
fn as_postgres(mut command: Command) -> Command {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return command;
    }
    let mut wrapped = Command::new("setpriv");
    wrapped.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(command.get_program());
    wrapped.args(command.get_args());
    command = wrapped;
    command
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        let bin = postgres_bin();
        let dir = std::env::temp_dir().join(format!("mediagate-bench-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let _ = Command::new("chown").args(["postgres:postgres"]).arg(&dir).status();
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-D"]).arg(&data);
        let out = as_postgres(initdb).output().unwrap_or_else(|e| panic!("initdb: {e}"));
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = free_port();
        let mut server = Command::new("taskset");
        server.args(["-c", "0"]).arg(bin.join("postgres")).arg("-D").arg(&data);
        server.args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400"]);
        server.arg("-c").arg(format!("unix_socket_directories={}", dir.display()));
        let server = as_postgres(server)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("postgres: {e}"));
        let cluster = Cluster { dir, port, server };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.psql("SELECT 1").status.success() {
            assert!(Instant::now() < deadline, "PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub(crate) fn psql(&self, sql: &str) -> std::process::Output {
        Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-d", "postgres", "-qAtc", sql])
            .output()
            .unwrap_or_else(|e| panic!("psql: {e}"))
    }

    /// pgbench running `script` (prepared statements) with `clients` for [`SECONDS`], pinned to core 1:
    /// scripts/s.
    fn pgbench(&self, script: &Path, clients: usize) -> f64 {
        let out = Command::new("taskset")
            .args(["-c", "1", "pgbench", "-n", "-M", "prepared", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-c", &clients.to_string(), "-j", "1", "-T", &SECONDS.to_string(), "-f"])
            .arg(script)
            .arg("postgres")
            .output()
            .unwrap_or_else(|e| panic!("pgbench: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("tps = ").and_then(|v| v.split_whitespace().next()?.parse().ok()))
            .unwrap_or_else(|| panic!("pgbench: {text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The statements one request commits on PostgreSQL, as the gateway sends them: the task, its count and its
/// hold in one transaction; then, for an async submission, the upstream's task id, or for a sync request,
/// its end and settlement.
fn script(ended: bool) -> String {
    let record = "decode(repeat('a5', 352), 'hex')";
    let id = "'pgb-' || :n";
    let mut sql = format!(
        "\\set n random(1, 9000000000000000000)\n\
         BEGIN;\n\
         UPDATE accounts SET in_flight = in_flight + 1 WHERE name = 'pgbench' AND in_flight < 2000000000;\n\
         INSERT INTO funds (account) VALUES ('pgbench') ON CONFLICT (account) DO NOTHING;\n\
         SELECT free_trial, plan, balance FROM funds WHERE account = 'pgbench' FOR UPDATE;\n\
         INSERT INTO ledger (account, kind, pot, delta, task_id, at_ms, note) VALUES ('pgbench', 'hold', 'balance', -1000, {id}, 0, 'm');\n\
         UPDATE funds SET free_trial = 0, plan = 0, balance = balance - 1000 WHERE account = 'pgbench';\n\
         INSERT INTO tasks (task_id, account, status, created_ms, ended_ms, upstream_task_id, next_poll_ms, record, lease_owner, submitted_by) \
         VALUES ({id}, 'pgbench', 'queued', 0, NULL, NULL, 0, {record}, 'r', 'r');\n\
         COMMIT;\n\
         BEGIN;\n\
         SELECT record FROM tasks WHERE task_id = {id} FOR UPDATE;\n"
    );
    if ended {
        sql.push_str(
            "UPDATE accounts SET in_flight = in_flight - 1 WHERE name = 'pgbench' AND in_flight > 0;\n\
             INSERT INTO funds (account) VALUES ('pgbench') ON CONFLICT (account) DO NOTHING;\n\
             SELECT free_trial, plan, balance FROM funds WHERE account = 'pgbench' FOR UPDATE;\n",
        );
        sql.push_str(&format!(
            "INSERT INTO ledger (account, kind, pot, delta, task_id, at_ms, note) VALUES ('pgbench', 'post', 'balance', 0, {id}, 0, 'm');\n\
             UPDATE funds SET free_trial = 0, plan = 0, balance = balance WHERE account = 'pgbench';\n\
             UPDATE tasks SET account = 'pgbench', status = 'success', created_ms = 0, ended_ms = 1, upstream_task_id = NULL, next_poll_ms = 0, record = {record} WHERE task_id = {id};\n"
        ));
    } else {
        sql.push_str(&format!(
            "UPDATE tasks SET account = 'pgbench', status = 'queued', created_ms = 0, ended_ms = NULL, upstream_task_id = 'u', next_poll_ms = 0, record = {record} WHERE task_id = {id};\n"
        ));
    }
    sql.push_str("COMMIT;\n");
    sql
}

pub fn run() -> String {
    let bin = crate::harness::bin_dir();
    let cluster = Cluster::start();
    let (sim_addr, gw_addr) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let _sim = start(
        1,
        &bin.join("mediagate"),
        &["simulate", "--listen", &sim_addr, "--time-scale", "0", "--key-prefix", "bench", "--concurrency", UNCAPPED],
        &[],
    );
    let dir = cluster.dir.join("gateway");
    let config_path = cluster.dir.join("gateway.yaml");
    // Without result copies, as the other lanes run (`bench/ab.sh`): a copy is background work, and the
    // pgbench script it is compared with has none.
    let extra = format!("store: {{url: '{}'}}\nresults: {{mirror: false}}\n", cluster.url());
    std::fs::write(&config_path, gateway_config(&gw_addr, &dir, &format!("http://{sim_addr}"), &extra))
        .unwrap_or_default();
    let env = [(UPSTREAM_KEY_ENV, "bench-cn-beijing"), (ADMIN_ENV, "bench-admin")];
    let gateway =
        start(0, &bin.join("mediagate"), &["serve", "--config", config_path.to_str().unwrap_or_default()], &env);
    crate::harness::wait_listening(&gw_addr);
    let admin = [("Authorization", "Bearer bench-admin"), ("Content-Type", "application/json")];
    http(&gw_addr, "POST", "/admin/v1/accounts", &admin, r#"{"name":"bench"}"#);
    http(&gw_addr, "POST", "/admin/v1/accounts/bench/top-up", &admin, r#"{"amount":1000000000000000}"#);
    let (_, key) = http(&gw_addr, "POST", "/admin/v1/accounts/bench/keys", &admin, "{}");
    let key: serde_json::Value = serde_json::from_str(&key).unwrap_or_default();
    let auth = format!("Bearer {}", key["key"].as_str().unwrap_or_default());
    let json = ("Content-Type", "application/json");
    let submit = Request::new(
        &gw_addr,
        "POST",
        "/v1/videos/generations",
        &[("Authorization", &auth), json],
        r#"{"model":"alpha2.6-t2v_t2v","prompt":"bench","duration":5}"#,
    );
    let sync = Request::new(
        &gw_addr,
        "POST",
        "/v1/images/generations",
        &[("Authorization", &auth), json],
        r#"{"model":"beta-image-2.0-pro_t2i","prompt":"bench","n":1}"#,
    );
    cluster.psql("INSERT INTO accounts (name, created_at) VALUES ('pgbench', '') ON CONFLICT DO NOTHING");
    cluster.psql("INSERT INTO funds (account, balance) VALUES ('pgbench', 1000000000000000) ON CONFLICT DO NOTHING");
    let scripts = [(false, cluster.dir.join("submit.sql")), (true, cluster.dir.join("sync.sql"))];
    for (ended, path) in &scripts {
        std::fs::write(path, script(*ended)).unwrap_or_default();
    }
    let (mut submits, mut syncs, mut bench_submits, mut bench_syncs) = (vec![], vec![], vec![], vec![]);
    let (mut submit_p99s, mut sync_p99s) = (vec![], vec![]);
    let mut errors = 0;
    for round in 0..ROUNDS {
        eprintln!("postgres round {}/{ROUNDS}", round + 1);
        for ((request, script), (gateway, p99s, pgbench)) in [(&submit, &scripts[0].1), (&sync, &scripts[1].1)]
            .into_iter()
            .zip([(&mut submits, &mut submit_p99s, &mut bench_submits), (&mut syncs, &mut sync_p99s, &mut bench_syncs)])
        {
            let (mut best, mut best_p99, mut best_pgbench) = (0.0f64, 0.0f64, 0.0f64);
            for clients in CONNECTIONS {
                let outcome = saturate(request, clients, Duration::from_secs(SECONDS));
                errors += outcome.errors;
                if outcome.rate() > best {
                    (best, best_p99) = (outcome.rate(), outcome.p99);
                }
                best_pgbench = best_pgbench.max(cluster.pgbench(script, clients));
            }
            gateway.push(best);
            p99s.push(best_p99);
            pgbench.push(best_pgbench);
        }
    }
    drop(gateway);
    let (submit, sync) = (median(submits), median(syncs));
    let (submit_p99, sync_p99) = (median(submit_p99s) / 1000.0, median(sync_p99s) / 1000.0);
    let (bench_submit, bench_sync) = (median(bench_submits), median(bench_syncs));
    let ratio = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
    format!(
        "## PostgreSQL: one replica, a local PostgreSQL\n\n\
         Gateway and PostgreSQL on core 0, load (and pgbench) on core 1; each side's best of {CONNECTIONS:?} clients \
         (the gateway's p99 at its best); pgbench runs the statements of one request, one transaction per write as \
         a gateway without group commit would (`bench/src/postgres.rs`, `script`; prepared), on the same database, \
         side by side: the ceiling of one request per transaction. Every request is one account's: its funds row \
         serialises them (a decision to spend holds the row's lock until its commit is durable).\n\n\
         | | mediagate/s | p99, ms | pgbench scripts/s | mediagate / pgbench | target |\n|---|---|---|---|---|---|\n\
         | async submissions (2 writes each) | {submit:.0} | {submit_p99:.1} | {bench_submit:.0} | {:.0}% | >= 300%: {} |\n\
         | sync requests (2 writes each) | {sync:.0} | {sync_p99:.1} | {bench_sync:.0} | {:.0}% | >= 300%: {} |\n\n\
         Errors during the runs: {errors}.\n\n",
        ratio(submit, bench_submit),
        met(ratio(submit, bench_submit) >= 300.0),
        ratio(sync, bench_sync),
        met(ratio(sync, bench_sync) >= 300.0),
    )
}

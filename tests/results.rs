//! Result mirroring end to end: every result file copied into the gateway's storage (the filesystem under
//! the data dir, or a real S3-compatible server, `s3s-fs`, started here), downloaded from the gateway once
//! the simulator has stopped (ranges included), through signed links that refuse any alteration; a copy
//! cut short by a SIGKILL made after the restart; one that cannot be made leaving the upstream's link.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, Process, Reply, free_port};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T2V: &str = "alpha2.6-t2v_t2v";
const T2I: &str = "beta-image-2.0-pro_t2i";

fn gateway(data_dir: &Path, simulator: &Process, extra: &str, env: &[(&str, &str)]) -> Demo {
    let config = common::serve_config(&simulator.address(), "", extra);
    Demo::serve(data_dir, &config, &[&[common::SIM_KEY][..], env].concat())
}

/// Submits a video (polled) and an image (answered at once) for `key`; returns their task ids.
fn submit_both(demo: &Demo, key: &str) -> Vec<String> {
    let video = demo.post_as(key, "/v1/videos/generations", &json!({"model": T2V, "prompt": "a fox", "duration": 2}));
    assert_eq!(video.status, 200, "{:?}", video.json);
    let image = demo.post_as(key, "/v1/images/generations", &json!({"model": T2I, "prompt": "a lighthouse"}));
    assert_eq!(image.status, 200, "{:?}", image.json);
    let listed = demo.get_as(key, "/v1/tasks?limit=1").json;
    vec![
        video.json["task_id"].as_str().unwrap().to_string(),
        listed["data"][0]["task_id"].as_str().unwrap().to_string(),
    ]
}

/// Waits until the task's mirroring is `status` (a copy cut short waits out its lease); returns the task.
fn wait_mirror(demo: &Demo, key: &str, task_id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = demo.get_as(key, &format!("/v1/tasks/{task_id}")).json;
        if task["mirror"]["status"] == status {
            return task;
        }
        assert!(Instant::now() < deadline, "{task_id} never {status}: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The gateway of `data_dir` started again with the config it last ran with (on a new port).
fn restart(data_dir: &Path) -> Demo {
    restart_with(data_dir, "")
}

/// [`restart`], with `extra` lines of config.
fn restart_with(data_dir: &Path, extra: &str) -> Demo {
    let config = std::fs::read_to_string(data_dir.join("serve-config.yaml")).unwrap();
    let mut kept: Vec<&str> =
        config.lines().filter(|l| !l.starts_with("listen:") && !l.starts_with("data_dir:")).collect();
    kept.push(extra);
    Demo::serve(data_dir, &kept.join("\n"), &[common::SIM_KEY])
}

/// A GET of an absolute URL, with `headers`, no redirect followed.
fn fetch(url: &str, headers: &[(&str, &str)]) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let mut request = agent.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let bytes = response.body_mut().read_to_vec().unwrap();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply { status, headers, json, bytes }
}

/// `link` as `demo` serves it: a restarted test gateway listens on another port.
fn served_at(demo: &Demo, link: &str) -> String {
    demo.url(&link[link.find("/v1/files/").unwrap()..])
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Every result of the mirrored `task` downloads from `demo` (by its link with no key, and by the content
/// route with `key`) as the bytes its SHA-256 and size say, with its type, tag and ranges.
fn downloads_whole(demo: &Demo, key: &str, task: &Value) {
    let task_id = task["task_id"].as_str().unwrap();
    for (index, result) in task["results"].as_array().unwrap().iter().enumerate() {
        let link = result["url"].as_str().unwrap();
        assert!(link.contains(&format!("/v1/files/{task_id}/{index}?")), "{link}");
        let url = &served_at(demo, link);
        let linked = fetch(url, &[]);
        assert_eq!(linked.status, 200, "{url}: {:?}", linked.json);
        assert_eq!(sha256(&linked.bytes), result["sha256"].as_str().unwrap());
        assert_eq!(linked.bytes.len() as u64, result["size"].as_u64().unwrap());
        assert_eq!(linked.header("content-type"), result["content_type"].as_str());
        assert_eq!(linked.header("etag"), Some(format!("\"{}\"", result["sha256"].as_str().unwrap()).as_str()));
        // The upstream's bytes on the gateway's origin: never sniffed, never run as a page of it.
        assert_eq!(linked.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(linked.header("content-security-policy"), Some("sandbox"));
        let auth = format!("Bearer {key}");
        let content = fetch(
            &demo.url(&format!("/v1/tasks/{task_id}/content?index={index}")),
            &[("Authorization", auth.as_str())],
        );
        assert_eq!((content.status, &content.bytes), (200, &linked.bytes));
        let ranged = fetch(url, &[("Range", "bytes=4-11")]);
        assert_eq!(ranged.status, 206);
        assert_eq!(ranged.bytes, linked.bytes[4..12]);
        let total = linked.bytes.len();
        assert_eq!(ranged.header("content-range"), Some(format!("bytes 4-11/{total}").as_str()));
        let tail = fetch(url, &[("Range", "bytes=-5")]);
        assert_eq!((tail.status, &tail.bytes[..]), (206, &linked.bytes[total - 5..]));
    }
}

/// Results are copied into the data dir and served from there once the simulator is gone, also after a
/// restart; a link altered anywhere is refused, and another account cannot read them by the content route.
#[test]
fn results_download_from_the_gateway_after_the_upstream_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.05", &[]);
    let mut demo = gateway(&tmp.path().join("gateway"), &simulator, "", &[]);
    let key = demo.account("acme", 1_000_000_000, 0, 0);
    let other = demo.account("globex", 1_000_000_000, 0, 0);
    let tasks: Vec<Value> =
        submit_both(&demo, &key).iter().map(|task_id| wait_mirror(&demo, &key, task_id, "mirrored")).collect();
    drop(simulator);
    for task in &tasks {
        assert!(task["results"][0]["url"].as_str().unwrap().starts_with(&format!("{}/v1/files/", demo.base)));
        downloads_whole(&demo, &key, task);
    }

    let task_id = tasks[0]["task_id"].as_str().unwrap();
    let url = tasks[0]["results"][0]["url"].as_str().unwrap();
    let signature = url.rsplit('=').next().unwrap();
    let flipped = format!("{}{}", &signature[..signature.len() - 1], if signature.ends_with('0') { '1' } else { '0' });
    let expires = url.split("expires=").nth(1).unwrap().split('&').next().unwrap();
    let later = (expires.parse::<i64>().unwrap() + 86_400).to_string();
    for altered in [
        url.replace(signature, &flipped),
        url.replace(&format!("expires={expires}"), &format!("expires={later}")),
        url.replace(&format!("/{task_id}/0?"), &format!("/{task_id}/1?")),
        url.replace(&format!("&signature={signature}"), ""),
    ] {
        let refused = fetch(&altered, &[]);
        assert_eq!((refused.status, refused.json["error"]["code"].as_str()), (403, Some("invalid_link")), "{altered}");
    }
    let auth = format!("Bearer {other}");
    let foreign = fetch(&demo.url(&format!("/v1/tasks/{task_id}/content")), &[("Authorization", &auth)]);
    assert_eq!((foreign.status, foreign.json["error"]["code"].as_str()), (404, Some("task_not_found")));
    let unauthenticated = fetch(&demo.url(&format!("/v1/tasks/{task_id}/content")), &[]);
    assert_eq!(unauthenticated.status, 401);
    let auth = format!("Bearer {key}");
    let beyond = fetch(&demo.url(&format!("/v1/tasks/{task_id}/content?index=5")), &[("Authorization", &auth)]);
    assert_eq!((beyond.status, beyond.json["error"]["param"].as_str()), (404, Some("index")));
    let out_of_file = fetch(url, &[("Range", "bytes=100000-100010")]);
    assert_eq!((out_of_file.status, out_of_file.json["error"]["code"].as_str()), (416, Some("range_not_satisfiable")));

    // The copies are the gateway's: a restart still serves them, the upstream still gone.
    demo.kill();
    let demo = restart(&tmp.path().join("gateway"));
    for task in &tasks {
        let task = demo.get_as(&key, &format!("/v1/tasks/{}", task["task_id"].as_str().unwrap())).json;
        downloads_whole(&demo, &key, &task);
    }
}

/// A copy is queued in the write that ends its task: a gateway killed as the copy starts makes it once
/// restarted, even with mirroring switched off meanwhile (the task's links promise the copy).
#[test]
fn a_copy_cut_short_by_a_crash_is_made_after_the_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.05", &[]);
    let data_dir = tmp.path().join("gateway");
    let mut crashing = gateway(&data_dir, &simulator, "", &[("MEDIAGATE_FAILPOINT", "before-mirror")]);
    let key = crashing.account("acme", 1_000_000_000, 0, 0);
    let body = json!({"model": T2V, "prompt": "a fox", "duration": 2});
    let task_id = crashing.post_as(&key, "/v1/videos/generations", &body).json["task_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let killed = loop {
        if let Some(status) = crashing.process.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the failpoint never fired");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed), Some(9), "SIGKILL: {killed:?}");
    crashing.kill();
    let demo = restart_with(&data_dir, "results: {mirror: false}");
    let task = wait_mirror(&demo, &key, &task_id, "mirrored");
    assert_eq!(task["status"], "success");
    drop(simulator);
    downloads_whole(&demo, &key, &task);
}

/// While no copy exists the links stream the upstream's file; a copy that cannot be made gives the results
/// their upstream links back and says why; with mirroring off, results are the upstream's and still download
/// through the content route; and a copy past its retention is refused.
#[test]
fn without_a_copy_results_come_from_the_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    let simulator = common::simulator("0.05", &[]);
    // Storage that refuses every connection: each copy waits for it, its link served from the upstream.
    let nowhere = format!("results: {{s3: {{bucket: b, endpoint: 'http://{}'}}", free_port());
    let env = [("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s"), ("AWS_DEFAULT_REGION", "us-east-1")];

    let retrying =
        gateway(&tmp.path().join("retrying"), &simulator, &format!("{nowhere}, retry_delays_ms: [600000]}}\n"), &env);
    let key = retrying.account("acme", 1_000_000_000, 0, 0);
    for task_id in submit_both(&retrying, &key) {
        let task =
            wait_until(&retrying, &key, &task_id, |t| t["status"] == "success" && t["mirror"]["status"] == "pending");
        let url = task["results"][0]["url"].as_str().unwrap();
        assert!(url.starts_with(&retrying.base), "{url}");
        let streamed = fetch(url, &[]);
        assert_eq!(streamed.status, 200, "{:?}", streamed.json);
        assert!(streamed.header("content-type").is_some_and(|t| t == "video/mp4" || t == "image/png"));
        assert!(!streamed.bytes.is_empty());
    }

    // Storage that answers and refuses (keys it does not know): each copy fails, and its attempts run out.
    let (_, s3_address, _refusing) = s3_bucket(tmp.path());
    let refusing =
        format!("results: {{s3: {{bucket: results-bucket, endpoint: 'http://{s3_address}', region: us-east-1}}");
    let failing =
        gateway(&tmp.path().join("failing"), &simulator, &format!("{refusing}, retry_delays_ms: [50]}}\n"), &env);
    let key = failing.account("acme", 1_000_000_000, 0, 0);
    for task_id in submit_both(&failing, &key) {
        let task = wait_mirror(&failing, &key, &task_id, "failed");
        assert!(task["mirror"]["error"].as_str().is_some_and(|e| !e.is_empty()), "{task}");
        let url = task["results"][0]["url"].as_str().unwrap();
        assert!(url.starts_with(&simulator.address()), "the upstream's link is back: {url}");
        assert!(task["results"][0].get("sha256").is_none(), "{task}");
        let auth = format!("Bearer {key}");
        let content = fetch(&failing.url(&format!("/v1/tasks/{task_id}/content")), &[("Authorization", &auth)]);
        assert_eq!((content.status, content.bytes.clone()), (200, fetch(url, &[]).bytes));
    }

    let off = gateway(&tmp.path().join("off"), &simulator, "results: {mirror: false}\n", &[]);
    let key = off.account("acme", 1_000_000_000, 0, 0);
    for task_id in submit_both(&off, &key) {
        let task = wait_until(&off, &key, &task_id, |t| t["status"] == "success");
        assert!(task.get("mirror").is_none(), "{task}");
        let url = task["results"][0]["url"].as_str().unwrap();
        assert!(url.starts_with(&simulator.address()), "{url}");
        let auth = format!("Bearer {key}");
        let content = fetch(&off.url(&format!("/v1/tasks/{task_id}/content")), &[("Authorization", &auth)]);
        assert_eq!((content.status, content.bytes.clone()), (200, fetch(url, &[]).bytes));
    }

    // Kept for no day: each copy has expired (by its second) as soon as it is made.
    let expiring = gateway(&tmp.path().join("expiring"), &simulator, "results: {retention_days: 0}\n", &[]);
    let key = expiring.account("acme", 1_000_000_000, 0, 0);
    let task_id = submit_both(&expiring, &key).remove(0);
    let task = wait_mirror(&expiring, &key, &task_id, "mirrored");
    std::thread::sleep(Duration::from_millis(1100));
    let expired = fetch(task["results"][0]["url"].as_str().unwrap(), &[]);
    assert_eq!((expired.status, expired.json["error"]["code"].as_str()), (403, Some("invalid_link")));
    let auth = format!("Bearer {key}");
    let content = fetch(&expiring.url(&format!("/v1/tasks/{task_id}/content")), &[("Authorization", &auth)]);
    assert_eq!((content.status, content.json["error"]["code"].as_str()), (410, Some("result_expired")));
}

fn wait_until(demo: &Demo, key: &str, task_id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = demo.get_as(key, &format!("/v1/tasks/{task_id}")).json;
        if done(&task) {
            return task;
        }
        assert!(Instant::now() < deadline, "{task_id}: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `s3s-fs` (an S3-compatible server over a directory, from crates.io): `tests/all.sh` installs it under
/// target/tools; one on the PATH does too.
fn s3s_fs() -> PathBuf {
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools/bin/s3s-fs");
    if local.exists() {
        return local;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("s3s-fs"))
        .find(|candidate| candidate.exists());
    on_path.unwrap_or_else(|| {
        panic!(
            "s3s-fs is missing: `cargo install s3s-fs@0.14.1 --features binary --root target/tools` (tests/all.sh does)"
        )
    })
}

/// Against a real S3-compatible server: results are copied into its bucket, and download from the gateway
/// (streamed through it, ranges included) and by a redirect to a presigned URL, the simulator gone.
#[test]
fn results_are_copied_into_s3_compatible_storage() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, address, server) = s3_bucket(tmp.path());
    let env = S3_ENV;
    let s3 = |presigned: u64| {
        format!(
            "results: {{s3: {{bucket: results-bucket, prefix: copies, endpoint: 'http://{address}', region: us-east-1, \
             presigned_seconds: {presigned}}}}}\n"
        )
    };
    let simulator = common::simulator("0.05", &[]);
    let data_dir = tmp.path().join("gateway");
    let mut demo = gateway(&data_dir, &simulator, &s3(0), &env);
    let key = demo.account("acme", 1_000_000_000, 0, 0);
    let tasks: Vec<Value> =
        submit_both(&demo, &key).iter().map(|task_id| wait_mirror(&demo, &key, task_id, "mirrored")).collect();
    drop(simulator);
    for task in &tasks {
        downloads_whole(&demo, &key, task);
        let task_id = task["task_id"].as_str().unwrap();
        let stored: Vec<PathBuf> = walk(&root.join("results-bucket/copies"))
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(task_id))
            .collect();
        assert_eq!(stored.len(), task["results"].as_array().unwrap().len(), "{stored:?}");
    }

    // Presigned: the gateway redirects, and the storage serves the bytes (and ranges) itself.
    demo.kill();
    let simulator = common::simulator("0.05", &[]);
    let demo = gateway(&data_dir, &simulator, &s3(60), &env);
    drop(simulator);
    for task in &tasks {
        let result = &task["results"][0];
        let redirected = fetch(&served_at(&demo, result["url"].as_str().unwrap()), &[]);
        assert_eq!(redirected.status, 302);
        let location = redirected.header("location").unwrap();
        assert!(location.starts_with(&format!("http://{address}/results-bucket/copies/")), "{location}");
        let direct = fetch(location, &[]);
        assert_eq!((direct.status, sha256(&direct.bytes)), (200, result["sha256"].as_str().unwrap().to_string()));
        let ranged = fetch(location, &[("Range", "bytes=4-11")]);
        assert_eq!((ranged.status, &ranged.bytes[..]), (206, &direct.bytes[4..12]));
    }
    drop(demo);

    // The storage down: a download is 503 storage_unavailable, worth retrying, not a 410 saying it is gone.
    drop(server);
    let simulator = common::simulator("0.05", &[]);
    let demo = gateway(&data_dir, &simulator, &s3(0), &env);
    let down = fetch(&served_at(&demo, tasks[0]["results"][0]["url"].as_str().unwrap()), &[]);
    assert_eq!(
        (down.status, down.json["error"]["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{:?}",
        down.json
    );
    assert!(!down.json["error"]["message"].as_str().unwrap().contains(&address), "the storage's address stays inside");
}

const S3_ENV: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "AKTEST"), ("AWS_SECRET_ACCESS_KEY", "SKTEST")];

/// `s3s-fs` on a free port, serving `dir/s3` with its bucket `results-bucket`: the root, the address and
/// the server.
fn s3_bucket(dir: &Path) -> (PathBuf, String, KilledOnDrop) {
    let root = dir.join("s3");
    std::fs::create_dir_all(root.join("results-bucket")).unwrap();
    let address = free_port();
    let server = start_s3(&root, &address);
    (root, address, server)
}

/// `s3s-fs` serving `root` (its buckets are its directories) at `address`, once it answers.
fn start_s3(root: &Path, address: &str) -> KilledOnDrop {
    let (host, port) = address.split_once(':').unwrap();
    let server = std::process::Command::new(s3s_fs())
        .args(["--host", host, "--port", port, "--access-key", "AKTEST", "--secret-key", "SKTEST"])
        .arg(root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = KilledOnDrop(server);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "s3s-fs did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// The storage down: a copy waits for it without using up its attempts (one retry is configured) and is made
/// once it is back; a download answers 503 at once rather than after the storage client's minutes of retries.
#[test]
fn a_copy_waits_out_a_storage_outage_and_a_download_during_one_answers_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, address, server) = s3_bucket(tmp.path());
    let config = format!(
        "results: {{retry_delays_ms: [300], s3: {{bucket: results-bucket, endpoint: 'http://{address}', region: us-east-1}}}}\n"
    );
    let simulator = common::simulator("0.05", &[]);
    let demo = gateway(&tmp.path().join("gateway"), &simulator, &config, &S3_ENV);
    let key = demo.account("acme", 1_000_000_000, 0, 0);
    drop(server);

    let video = demo.post_as(&key, "/v1/videos/generations", &json!({"model": T2V, "prompt": "a fox", "duration": 2}));
    let task_id = video.json["task_id"].as_str().unwrap().to_string();
    let task = wait_until(&demo, &key, &task_id, |t| t["status"] == "success" && t["mirror"].is_object());
    assert_eq!(task["mirror"]["status"], "pending", "{task}");
    // Several tries at the storage meanwhile, each a wait, not one of its attempts.
    std::thread::sleep(Duration::from_secs(3));
    let waiting = demo.get_as(&key, &format!("/v1/tasks/{task_id}")).json;
    assert_eq!(waiting["mirror"]["status"], "pending", "{waiting}");

    let server = start_s3(&root, &address);
    let copied = wait_mirror(&demo, &key, &task_id, "mirrored");
    downloads_whole(&demo, &key, &copied);

    // Down, refusing connections; then taking them and never answering, which object_store would wait out
    // for its timeout of 30 s per try.
    drop(server);
    let link = served_at(&demo, copied["results"][0]["url"].as_str().unwrap());
    let refused = fetch(&link, &[]);
    assert_eq!((refused.status, refused.json["error"]["code"].as_str()), (503, Some("storage_unavailable")));
    let _silent = std::net::TcpListener::bind(&address).unwrap();
    let asked = Instant::now();
    let down = fetch(&link, &[]);
    assert_eq!(
        (down.status, down.json["error"]["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{:?}",
        down.json
    );
    assert_eq!(down.header("retry-after"), Some("5"));
    // The download waits 4 s for the storage; the bound leaves room for a slow machine.
    assert!(asked.elapsed() < Duration::from_secs(15), "{:?}", asked.elapsed());
}

/// A child process killed (and waited for) when the test ends, also when it fails.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .map_while(Result::ok)
        .flat_map(|entry| {
            let path = entry.path();
            if path.is_dir() { walk(&path) } else { vec![path] }
        })
        .collect()
}

/// Every synchronous answer names the task it is kept as and links to the gateway's copies, on both image
/// routes; a partial success says which items were not made and why, whether the upstream named them
/// (`results` with a `code`) or just left them out (`choices` with fewer images than asked for).
#[test]
fn synchronous_answers_name_their_task_and_partial_successes_their_missing_items() {
    let demo = Demo::start();
    let gateway_link = |url: &Value| url.as_str().unwrap().starts_with(&demo.url("/v1/files/"));

    let generated = demo.post("/v1/images/generations", &json!({"model": T2I, "prompt": "a lighthouse"}));
    assert_eq!(generated.status, 200, "{:?}", generated.json);
    assert!(generated.json["task_id"].as_str().unwrap().starts_with("task-"), "{:?}", generated.json);
    assert!(gateway_link(&generated.json["data"][0]["url"]), "{:?}", generated.json);

    let edit = json!({"model": "beta-image-2.0-pro_i2i", "prompt": "in blue sim:partial", "n": 3,
        "images": ["https://m.example/a.png"]});
    let edited = demo.post("/v1/images/edits", &edit);
    assert_eq!(edited.status, 200, "{:?}", edited.json);
    let content = edited.json["output"]["choices"][0]["message"]["content"].as_array().unwrap().clone();
    assert_eq!(content.len(), 2, "{:?}", edited.json);
    assert!(content.iter().all(|item| gateway_link(&item["image_url"])), "{:?}", edited.json);
    assert_eq!(edited.json["failed_results"][0]["index"], 2, "{:?}", edited.json);
    assert_eq!(edited.json["failed_results"][0]["code"], "NotDelivered");
    let task = demo.get(&format!("/v1/tasks/{}", edited.json["task_id"].as_str().unwrap())).json;
    let listed: Vec<&Value> = task["results"].as_array().unwrap().iter().map(|r| &r["url"]).collect();
    assert_eq!(listed, content.iter().map(|item| &item["image_url"]).collect::<Vec<_>>(), "{task}");
    assert_eq!(task["failed_results"], edited.json["failed_results"]);

    let sketch = json!({"model": "alphax-sketch-to-image-lite_sketch", "image": "https://m.example/s.png",
        "prompt": "sim:partial", "n": 2});
    let accepted = demo.post("/v1/images/edits", &sketch);
    let task = demo.wait_terminal(accepted.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!((task["status"].as_str(), task["results"].as_array().map(Vec::len)), (Some("success"), Some(1)));
    let failed = &task["failed_results"][0];
    assert_eq!((failed["index"].as_u64(), failed["code"].as_str()), (Some(1), Some("DataInspectionFailed")), "{task}");
    assert!(failed["message"].as_str().is_some_and(|m| !m.is_empty()), "{task}");
}

/// The demo's videos play: a job's result is the simulator's H.264 video of the length and shape it asked for.
#[test]
fn a_video_result_has_the_length_and_shape_asked_for() {
    let demo = Demo::start();
    let body = json!({"model": T2V, "prompt": "a fox", "duration": 10, "size": "720*1280"});
    let accepted = demo.post("/v1/videos/generations", &body);
    let task_id = accepted.json["task_id"].as_str().unwrap().to_string();
    assert_eq!(demo.wait_terminal(&task_id, Duration::from_secs(30))["status"], "success");
    let content = demo.get(&format!("/v1/tasks/{task_id}/content"));
    assert_eq!((content.status, content.header("content-type")), (200, Some("video/mp4")));
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway/app/simulator/videos/9x16-10s.mp4");
    assert!(content.bytes == std::fs::read(fixture).unwrap(), "not the 9:16, 10 s video");
}

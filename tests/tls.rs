//! HTTPS end to end: `mediagate serve` reaching `mediagate simulate --tls` (a CA made at start) as it would a
//! real upstream: trusted through `SSL_CERT_FILE` alone, refused without it (uncharged), through a CONNECT
//! proxy, and the gateway's own TLS listener with the admin CLI verifying it.
#![allow(clippy::unwrap_used)]

mod common;

use common::{ADMIN_TOKEN, Demo, Process, SIM_KEY};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const SYNC_IMAGE: &str = "beta-image-2.0-pro_t2i";

/// `mediagate simulate --tls` on a free port: the process, its address and its CA file.
fn tls_simulator(dir: &Path) -> (Process, String, PathBuf) {
    let ca = dir.join("simulator-ca.pem");
    let simulator = common::simulator("0.02", &["--tls", "--ca-out", &ca.display().to_string()]);
    let address = simulator.address();
    assert!(address.starts_with("https://"), "{address}");
    (simulator, address, ca)
}

/// A gateway config with one region on the simulator at `simulator`, one worker, and a quick poller.
fn config(simulator: &str, extra_upstream: &str) -> String {
    common::serve_config(simulator, extra_upstream, "workers: 1\n")
}

fn connections_opened(gateway: &Demo) -> u64 {
    let metrics = String::from_utf8(gateway.request("GET", "/metrics", None, &[]).bytes).unwrap();
    metrics
        .lines()
        .find(|l| l.starts_with("mediagate_upstream_connections_opened_total{region=\"cn-beijing\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Runs a synchronous and an asynchronous job as account `acme` and checks both finish.
fn jobs_finish(gateway: &Demo) {
    let key = gateway.account("acme", 100_000_000, 0, 0);
    let sync = gateway.post_as(&key, "/v1/images/generations", &json!({"model": SYNC_IMAGE, "prompt": "a lighthouse"}));
    assert_eq!(sync.status, 200, "{:?}", sync.json);
    // The result's link is the gateway's, its bytes coming over TLS (streamed from the upstream or copied);
    // with result copies off, it is the upstream's own.
    let link = sync.json["data"][0]["url"].as_str().unwrap();
    match link.strip_prefix(&gateway.base) {
        Some(path) => {
            let file = gateway.request("GET", path, None, &[]);
            assert_eq!((file.status, file.header("content-type")), (200, Some("image/png")), "{:?}", file.json);
        }
        None => assert!(link.starts_with("https://"), "{link}"),
    }
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5});
    let accepted = gateway.post_as(&key, "/v1/videos/generations", &body);
    assert_eq!(accepted.status, 200, "{:?}", accepted.json);
    let task = gateway.wait_terminal_as(&key, accepted.json["task_id"].as_str().unwrap(), Duration::from_secs(30));
    assert_eq!(task["status"], "success", "{task}");
}

#[test]
fn an_upstream_signed_by_a_private_ca_is_trusted_through_ssl_cert_file_alone_and_refused_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (_simulator, address, ca) = tls_simulator(tmp.path());
    let ca = ca.display().to_string();

    // Result copies off: they run on a thread of their own, with a connection of their own, and this gateway
    // counts the request path's connections.
    let trusted = Demo::serve(
        &tmp.path().join("trusted"),
        &format!("results: {{mirror: false}}\n{}", config(&address, "")),
        &[SIM_KEY, ("SSL_CERT_FILE", &ca), ("SSL_CERT_DIR", "")],
    );
    jobs_finish(&trusted);
    // Connections are pooled and kept alive: more calls open no more of them (each would be a handshake).
    let key = trusted.account("pool", 100_000_000, 0, 0);
    let warm = connections_opened(&trusted);
    assert!(warm >= 1);
    for _ in 0..20 {
        let answer = trusted.post_as(&key, "/v1/images/generations", &json!({"model": SYNC_IMAGE, "prompt": "a boat"}));
        assert_eq!(answer.status, 200);
    }
    assert_eq!(connections_opened(&trusted), warm, "a TLS handshake on the per-request path");

    // The same gateway without the CA: refused, answered 503 without the host, logged with region and
    // reason, and not charged.
    let refused = Demo::serve(
        &tmp.path().join("refused"),
        &config(&address, ""),
        &[SIM_KEY, ("SSL_CERT_FILE", ""), ("SSL_CERT_DIR", "")],
    );
    let key = refused.account("acme", 100_000_000, 0, 0);
    let sync = refused.post_as(&key, "/v1/images/generations", &json!({"model": SYNC_IMAGE, "prompt": "a lighthouse"}));
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": 5});
    let asynchronous = refused.post_as(&key, "/v1/videos/generations", &body);
    for answer in [&sync, &asynchronous] {
        assert_eq!((answer.status, answer.code()), (503, "upstream_unavailable"), "{:?}", answer.json);
        assert!(!answer.json.to_string().contains("127.0.0.1"), "{:?}", answer.json);
    }
    assert_eq!(refused.funds("acme"), (0, 0, 100_000_000));
    let log = refused.process.stderr();
    assert!(log.contains("upstream TLS handshake failed") && log.contains("unknown issuer"), "{log}");
    assert!(log.contains("\"region\":\"cn-beijing\"") && !log.contains(&address), "{log}");
}

#[test]
fn the_demo_reaches_its_simulator_over_tls() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Demo::start_flags(tmp.path(), "127.0.0.1:0", 0.05, "", &[], &["--upstream-tls"]);
    jobs_finish(&demo);
    assert!(tmp.path().join("simulator/ca.pem").is_file());
}

/// A CONNECT proxy on loopback that counts the tunnels it opened.
fn connect_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let tunnels = Arc::new(AtomicUsize::new(0));
    let counted = tunnels.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let counted = counted.clone();
            std::thread::spawn(move || tunnel(client, &counted));
        }
    });
    (address, tunnels)
}

fn tunnel(mut client: TcpStream, tunnels: &AtomicUsize) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let target = line.strip_prefix("CONNECT ").and_then(|rest| rest.split(' ').next()).unwrap().to_string();
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    let upstream = TcpStream::connect(&target).unwrap();
    tunnels.fetch_add(1, Ordering::SeqCst);
    client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
    let (mut up_read, mut up_write) = (upstream.try_clone().unwrap(), upstream);
    let mut client_write = client;
    std::thread::spawn(move || std::io::copy(&mut reader, &mut up_write));
    let _ = std::io::copy(&mut up_read, &mut client_write);
}

#[test]
fn calls_go_through_a_configured_or_environment_proxy_unless_no_proxy_names_the_host() {
    let tmp = tempfile::tempdir().unwrap();
    let (_simulator, address, ca) = tls_simulator(tmp.path());
    let ca = ca.display().to_string();
    let trust = [SIM_KEY, ("SSL_CERT_FILE", ca.as_str()), ("HTTPS_PROXY", ""), ("NO_PROXY", "")];

    let (proxy, tunnels) = connect_proxy();
    let configured =
        Demo::serve(&tmp.path().join("configured"), &config(&address, &format!(", proxy: {proxy}")), &trust);
    jobs_finish(&configured);
    assert!(tunnels.load(Ordering::SeqCst) >= 1);

    let (proxy, tunnels) = connect_proxy();
    let with_env = |name: &str, no_proxy: &str| {
        let env = [&trust[..2], &[("HTTPS_PROXY", proxy.as_str()), ("NO_PROXY", no_proxy)]].concat();
        Demo::serve(&tmp.path().join(name), &config(&address, ""), &env)
    };
    jobs_finish(&with_env("environment", ""));
    let through_proxy = tunnels.load(Ordering::SeqCst);
    assert!(through_proxy >= 1);
    jobs_finish(&with_env("excluded", "127.0.0.1"));
    assert_eq!(tunnels.load(Ordering::SeqCst), through_proxy, "NO_PROXY was not honoured");
}

/// A CA and a certificate it signs for 127.0.0.1, as PEM files under `dir`: (CA, certificate, key).
fn listener_certificate(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))
        .unwrap();
    let paths = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

#[test]
fn the_gateway_serves_https_itself_and_the_admin_cli_verifies_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (ca, cert, key) = listener_certificate(tmp.path());
    let tls = format!("tls: {{cert_file: {}, key_file: {}}}\n", cert.display(), key.display());
    let mut gateway = Demo::serve(&tmp.path().join("gateway"), &tls, &[]);
    assert!(gateway.base.starts_with("https://"), "{}", gateway.base);
    gateway.trust(&ca);
    assert_eq!(gateway.admin("/accounts", Some(&json!({"name": "acme"}))).status, 201);

    let admin = |ssl_cert_file: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
            .args(["admin", "--url", &gateway.base, "account", "show", "acme"])
            .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("SSL_CERT_FILE", ssl_cert_file)
            .output()
            .unwrap()
    };
    let trusted = admin(&ca);
    assert!(trusted.status.success(), "{}", String::from_utf8_lossy(&trusted.stderr));
    assert!(String::from_utf8_lossy(&trusted.stdout).contains("\"acme\""));
    let refused = admin(&cert.with_file_name("no-such-ca.pem"));
    assert!(!refused.status.success());
    let refused = admin(&cert);
    assert!(!refused.status.success(), "a leaf that is not a CA must not be trusted as one");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("not signed by a CA this command trusts"), "{said}");
}

/// A lone self-signed certificate (a CA certificate, as `openssl req -x509` makes) served as the gateway's
/// own: the admin CLI refuses it, as rustls does, and says what to make instead.
#[test]
fn a_self_signed_ca_served_as_the_gateways_certificate_is_refused_with_what_to_do() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let tmp = tempfile::tempdir().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let (cert, key_file) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    std::fs::write(&cert, params.self_signed(&key).unwrap().pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let tls = format!("tls: {{cert_file: {}, key_file: {}}}\n", cert.display(), key_file.display());
    let gateway = Demo::serve(&tmp.path().join("gateway"), &tls, &[]);
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .args(["admin", "--url", &gateway.base, "--ca-file", cert.to_str().unwrap(), "model", "list"])
        .env("MEDIAGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("is itself a CA certificate"), "{said}");
    assert!(said.contains("--ca-file"), "{said}");
}

//! Submits one video job to a running `mediagate demo`, shows its progress, polls it to completion and
//! downloads the result.
//!
//! `cargo run --example submit_and_poll -- [BASE_URL] [API_KEY] [DOWNLOAD_DIR]` (defaults:
//! http://127.0.0.1:8080, the key the demo saved in ./mediagate-demo/demo-api-key, and
//! ./mediagate-demo/downloads).

use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args.next().unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let key = match args.next() {
        Some(key) => key,
        None => std::fs::read_to_string("mediagate-demo/demo-api-key")?.trim().to_string(),
    };
    let downloads = std::path::PathBuf::from(args.next().unwrap_or_else(|| "mediagate-demo/downloads".into()));
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let auth = format!("Bearer {key}");
    let body = json!({"model": "alpha2.6-t2v_t2v", "prompt": "a red fox running through snow at dawn", "duration": 5});
    let accepted: Value = agent
        .post(format!("{base}/v1/videos/generations"))
        .header("Authorization", &auth)
        .send_json(&body)?
        .body_mut()
        .read_json()?;
    let Some(task_id) = accepted["task_id"].as_str() else {
        return Err(format!("not accepted: {accepted}").into());
    };
    println!("submitted {task_id} ({})", accepted["request_id"]);
    let started = Instant::now();
    let mut last = String::new();
    let task = loop {
        let task: Value = agent
            .get(format!("{base}/v1/tasks/{task_id}"))
            .header("Authorization", &auth)
            .call()?
            .body_mut()
            .read_json()?;
        let status = task["status"].as_str().unwrap_or_default().to_string();
        if status != last {
            println!("{:>6.1}s  {status}", started.elapsed().as_secs_f64());
            last = status.clone();
        }
        if ["success", "failed", "timeout", "cancelled"].contains(&status.as_str()) {
            break task;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if task["status"] != "success" {
        return Err(format!("task ended {}: {}", task["status"], task["error"]).into());
    }
    println!("usage: {}", task["usage"]);
    println!("settlement: {}", task["settlement"]);
    let url = task["results"][0]["url"].as_str().ok_or("no result url")?;
    let bytes = agent.get(url).call()?.body_mut().read_to_vec()?;
    std::fs::create_dir_all(&downloads)?;
    let file = downloads.join(format!("{task_id}.mp4"));
    std::fs::write(&file, &bytes)?;
    println!(
        "downloaded {} bytes to {} (the link expires {})",
        bytes.len(),
        file.display(),
        task["results"][0]["expires_at"]
    );
    Ok(())
}

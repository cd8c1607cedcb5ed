//! A faithful local stand-in for the media-generation upstream (docs/upstream-protocol.md): routes under one
//! base URL per region, region-bound keys, the async-header rules, per-model validation, the task state
//! machine on scaled timings, per-family success payloads and `usage`, list, cancel, 24-hour expiry, and
//! the result files it serves itself. Prompt hooks (`sim:fail`, `sim:slow`, ...) reach every path.

mod capacity;
mod files;
mod index;
mod models;
mod store;
mod task;
pub mod tls;
mod validate;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use models::{Family, SimModel};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use store::TaskStore;
use task::SimTask;

/// How the simulator runs.
#[derive(Debug, Clone)]
pub struct SimulatorConfig {
    /// Multiplies every simulated duration: 1.0 takes a few seconds per job, 0 answers at once.
    pub time_scale: f64,
    /// Region -> the API keys valid there.
    pub keys: BTreeMap<String, Vec<String>>,
    /// Where tasks are kept across restarts; in memory when `None`.
    pub data_dir: Option<PathBuf>,
    /// Public base URL the simulator is reachable at, for result file URLs.
    pub public_base: String,
    /// Task queries per second per key; `None` is unlimited.
    pub query_qps: Option<f64>,
    /// Every model's cap on running tasks per key, instead of the simulator's own figures.
    pub concurrency: Option<u32>,
    /// Creates per second per key; `None` is unlimited.
    pub create_qps: Option<u32>,
}

/// Query counters, for proofs that a client respected the limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    pub queries: u64,
    /// The most queries one key made within one wall-clock second.
    pub max_per_second: u64,
}

/// One key's query counting: the current wall-clock second and its count, and the key's totals.
#[derive(Debug, Clone, Copy, Default)]
struct KeyWindow {
    second: i64,
    in_second: u64,
    stats: QueryStats,
}

pub struct Simulator {
    config: SimulatorConfig,
    tasks: TaskStore,
    inspection: Mutex<Vec<(String, String)>>,
    /// key -> its current second and totals
    windows: Mutex<HashMap<String, KeyWindow>>,
    stats: Mutex<QueryStats>,
    /// task -> queries answered, for `sim:query-error`.
    query_counts: Mutex<HashMap<String, u32>>,
    capacity: capacity::Capacity,
    /// Jobs (model and input) seen with `sim:flaky`: only the first attempt of each fails.
    flaky_seen: Mutex<std::collections::HashSet<String>>,
}

const PENDING_MS: f64 = 1000.0;
const SLOW_PENDING_MS: f64 = 6000.0;
const VIDEO_RUN_MS: f64 = 3000.0;
const IMAGE_RUN_MS: f64 = 1500.0;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Upstream timestamps: UTC+8 without offset, with milliseconds.
fn upstream_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms + 8 * 3600 * 1000)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_default()
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A JSON answer whose `x-request-id` header equals the body's `request_id`.
fn answer(status: StatusCode, mut body: Value) -> HttpResponse {
    let id = body.get("request_id").and_then(Value::as_str).map(String::from).unwrap_or_else(uuid);
    body["request_id"] = Value::String(id.clone());
    HttpResponse::build(status).insert_header(("x-request-id", id)).json(body)
}

fn error(status: u16, code: &str, message: &str) -> HttpResponse {
    answer(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), json!({"code": code, "message": message}))
}

/// Hooks written in the prompt text: `sim:name` or `sim:name=value`.
fn hooks(input: &Value) -> Vec<String> {
    let mut texts: Vec<&str> = ["prompt", "title", "prompt_text_zh", "prompt_text_en", "ref_prompt"]
        .iter()
        .filter_map(|k| input.get(*k).and_then(Value::as_str))
        .collect();
    for item in input.pointer("/messages/0/content").and_then(Value::as_array).into_iter().flatten() {
        texts.extend(item.get("text").and_then(Value::as_str));
    }
    texts.iter().flat_map(|t| t.split_whitespace()).filter_map(|w| w.strip_prefix("sim:")).map(String::from).collect()
}

fn hook<'a>(hooks: &'a [String], name: &str) -> Option<&'a str> {
    hooks.iter().find_map(|h| match h.split_once('=') {
        Some((k, v)) if k == name => Some(v),
        None if h == name => Some(""),
        _ => None,
    })
}

impl Simulator {
    pub fn open(config: SimulatorConfig) -> Result<Simulator, String> {
        let tasks = TaskStore::open(config.data_dir.as_deref())?;
        Ok(Simulator {
            tasks,
            inspection: Mutex::new(Vec::new()),
            windows: Mutex::new(HashMap::new()),
            stats: Mutex::new(QueryStats::default()),
            query_counts: Mutex::new(HashMap::new()),
            capacity: capacity::Capacity::new(config.concurrency, config.create_qps),
            flaky_seen: Mutex::default(),
            config,
        })
    }

    /// Where the simulator is reached: every region's base URL is under it.
    pub fn public_base(&self) -> &str {
        &self.config.public_base
    }

    pub fn region_base_url(&self, region: &str) -> String {
        format!("{}/{region}", self.config.public_base)
    }

    /// Every data-inspection header value received, with the request id it came with.
    pub fn data_inspection_log(&self) -> Vec<(String, String)> {
        self.inspection.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn query_stats(&self) -> QueryStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Query counters of every key that made a query, ordered by key.
    pub fn key_stats(&self) -> Vec<QueryStats> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<(&String, &KeyWindow)> = windows.iter().collect();
        keys.sort_by_key(|(k, _)| *k);
        keys.into_iter().map(|(_, w)| w.stats).collect()
    }

    /// Mounts the routes: `/{region}{api_root}/...` per region (the API root of spec/upstream.yaml) and
    /// `/files/...`.
    pub fn configure(self: &Arc<Self>, cfg: &mut web::ServiceConfig) {
        let data = web::Data::from(self.clone());
        let root = format!("/{{region}}{}", crate::domain::catalog::WIRE.api_root);
        cfg.app_data(data)
            .app_data(web::PayloadConfig::new(16 * 1024 * 1024))
            .route(&format!("{root}/services/aigc/{{route:.*}}"), web::post().to(create))
            .route(&format!("{root}/tasks"), web::get().to(list))
            .route(&format!("{root}/tasks/"), web::get().to(list))
            .route(&format!("{root}/tasks/{{id}}"), web::get().to(query))
            .route(&format!("{root}/tasks/{{id}}/cancel"), web::post().to(cancel))
            .route("/files/{name}", web::get().to(file))
            .route("/_sim/data-inspection", web::get().to(inspections))
            .route("/_sim/query-stats", web::get().to(query_stats))
            .route("/_sim/capacity-stats", web::get().to(capacity_stats));
    }

    fn scaled(&self, ms: f64) -> i64 {
        (ms * self.config.time_scale).round() as i64
    }

    /// The index of the caller's key among `region`'s (each key is one upstream account), else the 401.
    fn account(&self, req: &HttpRequest, region: &str) -> Result<usize, Unauthorized> {
        let key = self.authorize(req, region)?;
        Ok(self.account_of(region, &key))
    }

    fn account_of(&self, region: &str, key: &str) -> usize {
        self.config.keys.get(region).and_then(|keys| keys.iter().position(|k| k == key)).unwrap_or_default()
    }

    /// The caller's key if it is valid in `region`, else the upstream's 401.
    fn authorize(&self, req: &HttpRequest, region: &str) -> Result<String, Unauthorized> {
        let key = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|k| !k.is_empty());
        let Some(key) = key else { return Err(Unauthorized("No API-key provided.")) };
        match self.config.keys.get(region) {
            Some(keys) if keys.iter().any(|k| k == key) => Ok(key.to_string()),
            _ => Err(Unauthorized("Invalid API-key provided.")),
        }
    }

    /// The caller's account for a task query or list, or why it is refused (bad key, or over the per-key
    /// limit).
    fn query_account(&self, req: &HttpRequest, region: &str) -> Result<usize, Refusal> {
        let key = self.authorize(req, region).map_err(|Unauthorized(why)| Refusal::Key(why))?;
        if !self.admit_query(&key) {
            return Err(Refusal::Throttled);
        }
        Ok(self.account_of(region, &key))
    }

    /// Counts a query against the key's per-second limit.
    fn admit_query(&self, key: &str) -> bool {
        let second = now_ms() / 1000;
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let window = windows.entry(key.to_string()).or_default();
        if window.second != second {
            (window.second, window.in_second) = (second, 0);
        }
        if let Some(qps) = self.config.query_qps
            && window.in_second as f64 >= qps
        {
            return false;
        }
        window.in_second += 1;
        window.stats.queries += 1;
        window.stats.max_per_second = window.stats.max_per_second.max(window.in_second);
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.queries += 1;
        stats.max_per_second = stats.max_per_second.max(window.in_second);
        true
    }

    /// The upstream status of a task now.
    fn status(&self, task: &SimTask, now: i64) -> &'static str {
        task.timeline().status(now)
    }
}

/// A 401 `InvalidApiKey` with its message.
struct Unauthorized(&'static str);

impl Unauthorized {
    fn response(&self) -> HttpResponse {
        error(401, "InvalidApiKey", self.0)
    }
}

/// Why a task query or list is refused.
enum Refusal {
    Key(&'static str),
    Throttled,
}

impl Refusal {
    fn response(&self) -> HttpResponse {
        match self {
            Refusal::Key(why) => Unauthorized(why).response(),
            Refusal::Throttled => {
                error(429, "Throttling.RateQuota", "Requests rate limit exceeded, please try again later.")
            }
        }
    }
}

async fn create(
    sim: web::Data<Simulator>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let (region, route) = path.into_inner();
    let account = match sim.account(&req, &region) {
        Ok(account) => account,
        Err(refusal) => return refusal.response(),
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "InvalidParameter", "The request body is not valid JSON.");
    };
    let route = format!("/services/aigc/{}", route.trim_end_matches('/'));
    let Some(code) = body.get("model").and_then(Value::as_str) else {
        return error(400, "BadRequest.EmptyModel", "Required parameter \"model\" missing from request.");
    };
    let Some(input) = body.get("input").filter(|i| i.is_object()) else {
        return error(400, "BadRequest.EmptyInput", "Required parameter \"input\" missing from request.");
    };
    let parameters = body.get("parameters").cloned().unwrap_or_else(|| json!({}));
    let Some(model) = models::find(code).filter(|m| m.regions.contains(&region.as_str())) else {
        return error(400, "InvalidParameter", "Model not exist.");
    };
    let wire = &crate::domain::catalog::WIRE;
    let asynchronous =
        req.headers().get(wire.async_header.name).and_then(|v| v.to_str().ok()) == Some(wire.async_header.value);
    if model.route != route {
        return error(400, "InvalidParameter", "The model is not served on this route.");
    }
    if model.sync && asynchronous {
        return error(403, "AccessDenied", "current user api does not support asynchronous calls");
    }
    if !model.sync && !asynchronous {
        return error(403, "AccessDenied", "current user api does not support synchronous calls");
    }
    let request_id = uuid();
    if let Some(value) = req.headers().get(wire.data_inspection_header.name).and_then(|v| v.to_str().ok()) {
        sim.inspection.lock().unwrap_or_else(|e| e.into_inner()).push((request_id.clone(), value.to_string()));
    }
    if let Err(message) = validate::check(model, input, &parameters) {
        return error(400, "InvalidParameter", &message);
    }
    let hooks = hooks(input);
    let refused = [
        ("reject", 400, "InvalidParameter", "Invalid parameter: prompt"),
        ("inspect", 400, "DataInspectionFailed", "Input or output data may contain inappropriate content."),
        ("throttle", 429, "Throttling.RateQuota", "Requests rate limit exceeded, please try again later."),
        (
            "error",
            500,
            "InternalError",
            "An internal error has occured, please try again later or contact service support.",
        ),
        ("unavailable", 503, "ModelUnavailable", "Model is unavailable, please try again later."),
        ("arrears", 400, "Arrearage", "Access denied, please make sure your account is in good standing."),
        ("quota", 403, "AllocationQuota.FreeTierOnly", "The free tier of the model has been exhausted."),
    ];
    if let Some((_, status, code, message)) = refused.iter().find(|(h, ..)| hook(&hooks, h).is_some()) {
        return error(*status, code, message);
    }
    let now = now_ms();
    let run = if model.video { VIDEO_RUN_MS } else { IMAGE_RUN_MS };
    // `sim:flaky`: the first attempt at a job fails for the upstream's own reasons; it is the same job when
    // the model and the input are.
    let job = hook(&hooks, "flaky").map(|_| format!("{code}\n{input}\n{parameters}"));
    let flaky =
        job.as_ref().is_some_and(|job| sim.flaky_seen.lock().unwrap_or_else(|e| e.into_inner()).insert(job.clone()));
    let task = SimTask {
        task_id: uuid(),
        request_id: request_id.clone(),
        model: model.code.to_string(),
        region: region.clone(),
        account,
        created_ms: now,
        // `sim:slow` stays cancellable for at least two seconds whatever the time scale.
        pending_ms: if hook(&hooks, "slow").is_some() {
            sim.scaled(SLOW_PENDING_MS).max(2000)
        } else {
            sim.scaled(PENDING_MS)
        },
        running_ms: if hook(&hooks, "never").is_some() { None } else { Some(sim.scaled(run)) },
        fail_code: hook(&hooks, "fail")
            .map(|c| if c.is_empty() { "InvalidParameter.FileDownload".into() } else { c.to_string() })
            .or_else(|| flaky.then(|| "InternalError".into())),
        cancelled_ms: None,
        input: input.clone(),
        parameters,
        hooks,
    };
    let slow = hook(&task.hooks, "slow").is_some();
    let end_ms = match (model.sync, task.running_ms) {
        (true, _) => now + if slow { task.pending_ms } else { 0 },
        (false, Some(run)) => now + task.pending_ms + run,
        (false, None) => i64::MAX,
    };
    if sim.capacity.admit(&region, account, model.code, &task.task_id, now, end_ms).is_err() {
        if let Some(job) = job.filter(|_| flaky) {
            // Refused before it ran: its next attempt is still its first.
            sim.flaky_seen.lock().unwrap_or_else(|e| e.into_inner()).remove(&job);
        }
        return error(429, "Throttling.RateQuota", "Requests rate limit exceeded, please try again later.");
    }
    if model.sync {
        if slow {
            actix_web::rt::time::sleep(std::time::Duration::from_millis(task.pending_ms as u64)).await;
        }
        if flaky {
            return error(500, "InternalError", "An internal error has occured, please try again later.");
        }
        let (output, usage) = success(&sim, model, &task, now_ms());
        return answer(StatusCode::OK, json!({"request_id": request_id, "output": output, "usage": usage}));
    }
    if let Err(e) = sim.tasks.put(&task) {
        tracing::error!(error = %e, "simulator could not store a task");
        return error(500, "InternalError", "An internal error has occured, please try again later.");
    }
    answer(
        StatusCode::OK,
        json!({"request_id": request_id, "output": {"task_status": "PENDING", "task_id": task.task_id}}),
    )
}

async fn query(sim: web::Data<Simulator>, req: HttpRequest, path: web::Path<(String, String)>) -> HttpResponse {
    let (region, id) = path.into_inner();
    let account = match sim.query_account(&req, &region) {
        Ok(account) => account,
        Err(refusal) => return refusal.response(),
    };
    let now = now_ms();
    // Another account's task is as unknown as one never created.
    let task = sim.tasks.get(&id).filter(|t| t.region == region && t.account == account);
    let Some(task) = task else {
        return answer(StatusCode::OK, json!({"output": {"task_id": id, "task_status": "UNKNOWN"}}));
    };
    if hook(&task.hooks, "query-error").is_some() {
        let mut counts = sim.query_counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(id.clone()).or_default();
        *count += 1;
        if *count <= 2 {
            return error(500, "InternalError", "An internal error has occured, please try again later.");
        }
    }
    let status = sim.status(&task, now);
    let mut output =
        json!({"task_id": task.task_id, "task_status": status, "submit_time": upstream_time(task.created_ms)});
    let started = task.created_ms + task.pending_ms;
    if status != "PENDING" && status != "UNKNOWN" && task.cancelled_ms.is_none() {
        output["scheduled_time"] = upstream_time(started).into();
    }
    let end = task.cancelled_ms.unwrap_or(started + task.running_ms.unwrap_or(0));
    let mut body = json!({});
    match status {
        "SUCCEEDED" => {
            let Some(model) = models::find(&task.model) else { return error(500, "InternalError", "unknown model") };
            let (extra, usage) = success(&sim, model, &task, end);
            if let (Some(out), Some(extra)) = (output.as_object_mut(), extra.as_object()) {
                out.extend(extra.clone());
            }
            output["end_time"] = if model.code == "alphax-style-repaint-v1" {
                upstream_time(end).get(..19).unwrap_or_default().into()
            } else {
                upstream_time(end).into()
            };
            body["usage"] = usage;
        }
        "FAILED" => {
            output["end_time"] = upstream_time(end).into();
            output["code"] = task.fail_code.clone().unwrap_or_default().into();
            output["message"] = "The task failed in the simulated upstream.".into();
        }
        "CANCELED" => output["end_time"] = upstream_time(end).into(),
        _ => {}
    }
    body["output"] = output;
    answer(StatusCode::OK, body)
}

/// `(output members, usage)` of a successful job, per family (docs/upstream-protocol.md section 5).
fn success(sim: &Simulator, model: &SimModel, task: &SimTask, end_ms: i64) -> (Value, Value) {
    let base = &sim.config.public_base;
    let now_s = end_ms / 1000;
    let url = |i: usize, ext: &str| files::signed_url(base, &format!("{}-{i}.{ext}", task.task_id), now_s);
    let p = &task.parameters;
    let mut usage = if model.video {
        let seconds = hook(&task.hooks, "seconds")
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or_else(|| p.get("duration").and_then(Value::as_f64).unwrap_or(model.default_duration as f64));
        let tier = p
            .get("resolution")
            .and_then(Value::as_str)
            .or_else(|| p.get("size").and_then(Value::as_str).and_then(models::tier_of_size))
            .unwrap_or(model.default_resolution);
        let sr: u64 = tier.trim_end_matches('P').parse().unwrap_or(720);
        let size = p.get("size").and_then(Value::as_str).unwrap_or(match tier {
            "1080P" => "1920*1080",
            "480P" => "832*480",
            _ => "1280*720",
        });
        let input_seconds = if model.code.contains("r2v") { 2.0 } else { 0.0 };
        let mut usage = match model.family {
            Family::Alpha26 if model.code.contains("r2v") => {
                json!({"duration": seconds + input_seconds, "size": size, "input_video_duration": input_seconds, "output_video_duration": seconds, "video_count": 1, "SR": sr})
            }
            Family::Alpha26 => {
                json!({"duration": seconds as i64, "size": size, "input_video_duration": 0, "output_video_duration": seconds as i64, "video_count": 1, "SR": sr})
            }
            Family::Alpha26I2v { flash } => {
                let mut u = json!({"duration": seconds as i64, "input_video_duration": 0, "output_video_duration": seconds as i64, "video_count": 1, "SR": sr});
                if flash {
                    u["audio"] = p.get("audio").and_then(Value::as_bool).unwrap_or(true).into();
                }
                u
            }
            Family::Alpha27 => {
                json!({"duration": seconds + input_seconds, "input_video_duration": input_seconds, "output_video_duration": seconds, "video_count": 1, "SR": sr, "ratio": p.get("ratio").cloned().unwrap_or_else(|| "16:9".into())})
            }
            Family::Alpha25 => json!({"duration": seconds as i64, "SR": sr, "video_count": 1}),
            Family::Kf22 => json!({"video_duration": seconds as i64, "video_count": 1, "SR": sr}),
            Family::Alphax21 => json!({"video_duration": seconds as i64, "video_ratio": "standard", "video_count": 1}),
            _ => json!({"video_duration": seconds as i64, "video_count": 1}),
        };
        // `sim:seconds=WORD` that is no number reports the word itself, as a broken upstream might.
        if let Some(word) = hook(&task.hooks, "seconds").filter(|s| s.parse::<f64>().is_err()) {
            let member = if usage.get("duration").is_some() { "duration" } else { "video_duration" };
            usage[member] = word.into();
        }
        usage
    } else {
        json!({})
    };
    let mut output = json!({});
    if model.video {
        // A playable video of the length asked for, at the aspect of the size or ratio asked for.
        let seconds = p.get("duration").and_then(Value::as_f64).unwrap_or(model.default_duration as f64);
        let dimensions = p.get("size").and_then(Value::as_str).and_then(|s| s.split_once('*'));
        let aspect = match (dimensions, p.get("ratio").and_then(Value::as_str).and_then(|r| r.split_once(':'))) {
            (Some((w, h)), _) | (None, Some((w, h))) => w.parse::<f64>().ok().zip(h.parse::<f64>().ok()),
            _ => None,
        }
        .map_or(16.0 / 9.0, |(w, h)| w / h.max(1.0));
        let name = files::video_name(&format!("{}-0", task.task_id), aspect, seconds);
        output["video_url"] = files::signed_url(base, &name, now_s).into();
        output["orig_prompt"] = task.input.get("prompt").cloned().unwrap_or_default();
        if p.get("prompt_extend") == Some(&Value::Bool(true)) && !model.code.starts_with("alpha2.6") {
            output["actual_prompt"] = task.input.get("prompt").cloned().unwrap_or_default();
        }
    } else {
        let n =
            p.get("n").or_else(|| task.input.get("generate_num")).and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
        let failed = usize::from(hook(&task.hooks, "partial").is_some() && n >= 2);
        let delivered = n - failed;
        match model.family {
            Family::Choices => {
                let typed = !model.sync;
                let items: Vec<Value> = (0..delivered)
                    .map(|i| {
                        if typed {
                            json!({"type": "image", "image": url(i, "png")})
                        } else {
                            json!({"image": url(i, "png")})
                        }
                    })
                    .collect();
                output["choices"] =
                    json!([{"finish_reason": "stop", "message": {"role": "assistant", "content": items}}]);
                if typed {
                    output["finished"] = true.into();
                    usage = json!({"image_count": delivered, "size": p.get("size").cloned().unwrap_or_else(|| "1280*1280".into()), "input_tokens": 0, "output_tokens": 0, "total_tokens": 0});
                } else {
                    usage = json!({"width": 1024, "height": 1024, "image_count": delivered});
                }
            }
            Family::OutputUrl => {
                output["output_image_url"] = url(0, "png").into();
                usage = json!({"image_count": 1});
            }
            Family::Segmentation => {
                output["output_image_url"] = url(0, "png").into();
                output["output_vis_image_url"] = url(1, "png").into();
                usage = json!({"image_count": 1});
            }
            Family::Poster => {
                output["render_urls"] = (0..delivered).map(|i| url(i, "png")).collect::<Vec<_>>().into();
                usage = json!({"image_count": delivered});
            }
            _ => {
                let mut results: Vec<Value> = (0..delivered).map(|i| json!({"url": url(i, "png")})).collect();
                if failed > 0 {
                    results.push(json!({"code": "DataInspectionFailed", "message": "Output data may contain inappropriate content."}));
                }
                output["results"] = results.into();
                output["task_metrics"] = json!({"TOTAL": n, "SUCCEEDED": delivered, "FAILED": failed});
                if model.family == Family::StyleRepaint {
                    output["error_code"] = 0.into();
                    output["error_message"] = "Success".into();
                    output["style_index"] = task.input.get("style_index").cloned().unwrap_or_default();
                }
                usage = json!({"image_count": delivered});
            }
        }
    }
    if let Some(raw) = hook(&task.hooks, "tokens") {
        usage["output_tokens"] = match raw {
            "null" => Value::Null,
            other => other.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::String(other.to_string())),
        };
    }
    (output, usage)
}

async fn cancel(sim: web::Data<Simulator>, req: HttpRequest, path: web::Path<(String, String)>) -> HttpResponse {
    let (region, id) = path.into_inner();
    let account = match sim.account(&req, &region) {
        Ok(account) => account,
        Err(refusal) => return refusal.response(),
    };
    let refuse = || {
        error(
            400,
            "UnsupportedOperation",
            "Failed to cancel the task, please confirm if the task is in PENDING status.",
        )
    };
    let Some(mut task) = sim.tasks.get(&id).filter(|t| t.region == region && t.account == account) else {
        return refuse();
    };
    let now = now_ms();
    if sim.status(&task, now) != "PENDING" {
        return refuse();
    }
    task.cancelled_ms = Some(now);
    if sim.tasks.put(&task).is_err() {
        return error(500, "InternalError", "An internal error has occured, please try again later.");
    }
    sim.capacity.ended(&region, &task.model, &task.task_id);
    answer(StatusCode::OK, json!({}))
}

#[derive(serde::Deserialize)]
struct ListQuery {
    task_id: Option<String>,
    start_time: Option<String>,
    end_time: Option<String>,
    model_name: Option<String>,
    status: Option<String>,
    page_no: Option<u64>,
    page_size: Option<u64>,
}

fn parse_compact(time: &str) -> Option<i64> {
    let naive = chrono::NaiveDateTime::parse_from_str(time, "%Y%m%d%H%M%S").ok()?;
    Some(naive.and_utc().timestamp_millis() - 8 * 3600 * 1000)
}

async fn list(
    sim: web::Data<Simulator>,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<ListQuery>,
) -> HttpResponse {
    let region = path.into_inner();
    let account = match sim.query_account(&req, &region) {
        Ok(account) => account,
        Err(refusal) => return refusal.response(),
    };
    let now = now_ms();
    let end = query.end_time.as_deref().and_then(parse_compact).unwrap_or(now);
    let start = query.start_time.as_deref().and_then(parse_compact).unwrap_or(end - 24 * 3600 * 1000);
    if end - start > 24 * 3600 * 1000 || start > end {
        return error(400, "InvalidParameter", "Invalid parameter: start_time");
    }
    let page_no = query.page_no.unwrap_or(1).max(1);
    let page_size = query.page_size.unwrap_or(10).clamp(1, 1000);
    let filter = index::Filter {
        start_ms: start,
        end_ms: end,
        task_id: query.task_id.as_deref(),
        model: query.model_name.as_deref(),
        status: query.status.as_deref(),
        now,
    };
    let (total, rows) = sim.tasks.index().page(&region, account, &filter, page_no, page_size);
    let data: Vec<Listed> = rows.iter().map(|row| listed(row, &region, now)).collect();
    let request_id = uuid();
    // Serialized straight from the rows: a page can hold a thousand tasks.
    HttpResponse::Ok().insert_header(("x-request-id", request_id.as_str())).json(ListAnswer {
        total,
        total_page: total.div_ceil(page_size),
        page_no,
        page_size,
        request_id: &request_id,
        data,
    })
}

/// A list answer (not wrapped in `output`).
#[derive(serde::Serialize)]
struct ListAnswer<'a> {
    total: u64,
    total_page: u64,
    page_no: u64,
    page_size: u64,
    request_id: &'a str,
    data: Vec<Listed<'a>>,
}

/// One item of a list answer; times in epoch ms, `end_time` only once terminal.
#[derive(serde::Serialize)]
struct Listed<'a> {
    task_id: &'a str,
    status: &'static str,
    model_name: &'a str,
    region: &'a str,
    request_id: &'a str,
    gmt_create: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_time: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_time: Option<i64>,
    user_api_unique_key: String,
}

fn listed<'a>(row: &'a index::Row, region: &'a str, now: i64) -> Listed<'a> {
    let status = row.timeline.status(now);
    let route = models::find(&row.model).map(|m| m.route).unwrap_or_default();
    let route_key = route.trim_start_matches("/services/aigc/").replace('/', ":");
    Listed {
        task_id: &row.task_id,
        status,
        model_name: &row.model,
        region,
        request_id: &row.request_id,
        gmt_create: row.timeline.created_ms,
        start_time: (status != "PENDING").then(|| row.timeline.started_ms()),
        end_time: matches!(status, "SUCCEEDED" | "FAILED" | "CANCELED").then(|| row.timeline.end_ms()),
        user_api_unique_key: format!("apikey:v1:aigc:{route_key}:{}", row.model),
    }
}

/// Test introspection: every data-inspection header value received, oldest first.
async fn inspections(sim: web::Data<Simulator>) -> HttpResponse {
    let values: Vec<String> = sim.data_inspection_log().into_iter().map(|(_, v)| v).collect();
    HttpResponse::Ok().json(json!({"values": values}))
}

/// Test introspection: task queries and lists answered, the most one key made in one second, and the same
/// per key (ordered by key, keys themselves not shown).
async fn query_stats(sim: web::Data<Simulator>) -> HttpResponse {
    let stats = sim.query_stats();
    let per_key: Vec<Value> =
        sim.key_stats().iter().map(|k| json!({"queries": k.queries, "max_per_second": k.max_per_second})).collect();
    HttpResponse::Ok()
        .json(json!({"queries": stats.queries, "max_per_second": stats.max_per_second, "per_key": per_key}))
}

/// Test introspection: per region and key index (keys themselves not shown), per model, tasks running now,
/// the most ever running at once, creates accepted and creates refused for capacity.
async fn capacity_stats(sim: web::Data<Simulator>) -> HttpResponse {
    HttpResponse::Ok().json(json!({"accounts": sim.capacity.stats(now_ms())}))
}

#[derive(serde::Deserialize)]
struct Signed {
    #[serde(rename = "Expires")]
    expires: Option<i64>,
    #[serde(rename = "Signature")]
    signature: Option<String>,
}

async fn file(path: web::Path<String>, query: web::Query<Signed>) -> HttpResponse {
    let name = path.into_inner();
    let (Some(expires), Some(signature)) = (query.expires, query.signature.as_deref()) else {
        return HttpResponse::Forbidden().body("missing signature");
    };
    if signature != files::signature(&name, expires) {
        return HttpResponse::Forbidden().body("bad signature");
    }
    if chrono::Utc::now().timestamp() > expires {
        return HttpResponse::Forbidden().body("expired");
    }
    if name.ends_with(".mp4") {
        HttpResponse::Ok().content_type("video/mp4").body(files::video(&name))
    } else {
        HttpResponse::Ok().content_type("image/png").body(files::png())
    }
}

/// The simulator alone on `listener`, over TLS when `tls` is given; it runs until the process ends.
pub fn server(
    simulator: Arc<Simulator>,
    listener: std::net::TcpListener,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<actix_web::dev::Server> {
    let server = actix_web::HttpServer::new(move || {
        let simulator = simulator.clone();
        actix_web::App::new().configure(move |cfg| simulator.configure(cfg))
    })
    .on_connect(crate::edges::http::peer::set_nodelay);
    let server = match tls {
        Some(tls) => server.listen_rustls_0_23(listener, tls)?,
        None => server.listen(listener)?,
    };
    Ok(server.run())
}

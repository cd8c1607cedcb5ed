//! Cost of the edge before anything is forwarded: key lookup (auth) + admission (model, endpoint,
//! schema, rules, typed deserialization, envelope) for one request of each endpoint.
//!
//! `cargo bench --bench edge`

use criterion::{Criterion, criterion_group, criterion_main};
use mediagate::adapters::store::embedded::Store;
use mediagate::domain::admission::admit;
use mediagate::domain::catalog::ENDPOINTS;
use mediagate::domain::registry::Registry;
use mediagate::domain::tasks::hash_key;
use mediagate::ports::storage::Accounts;
use serde_json::{Value, json};
use std::hint::black_box;

fn requests() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/videos/generations",
            json!({"model": "alpha2.6-t2v_t2v", "prompt": "a red fox running through snow at dawn", "size": "1280*720", "duration": 10, "shot_type": "multi", "prompt_extend": true}),
        ),
        (
            "/v1/images/generations",
            json!({"model": "beta-image-2.0-pro_t2i", "prompt": "a flower shop at night", "n": 2}),
        ),
        (
            "/v1/images/edits",
            json!({"model": "alphax-style-repaint-v1_style_repaint", "image": "https://m.example/p.png", "style_index": -1, "style_ref_url": "https://m.example/s.png"}),
        ),
    ]
}

fn edge(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let key = runtime.block_on(store.create_key("bench")).unwrap_or_else(|e| panic!("{e}"));
    // The first lookup reads the store and caches the record; the edge then finds it without a store call
    // (`services::auth::authenticate_now`), which is what each request below costs.
    let hash = hash_key(&key);
    runtime.block_on(store.key(&hash)).unwrap_or_else(|e| panic!("{e}"));
    assert!(store.cached_key(&hash).is_some(), "the key is cached after its first lookup");
    let registry = Registry::new(Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    for (path, body) in requests() {
        let endpoint = ENDPOINTS.iter().find(|e| e.path == path).unwrap_or_else(|| panic!("{path}"));
        c.bench_function(&format!("auth+admit {path}"), |b| {
            b.iter(|| {
                let record = store.cached_key(&hash_key(black_box(&key)));
                black_box(record);
                let admitted = admit(&registry, endpoint, black_box(body.clone())).unwrap_or_else(|e| panic!("{e}"));
                black_box(admitted);
            })
        });
    }
}

criterion_group!(benches, edge);
criterion_main!(benches);
